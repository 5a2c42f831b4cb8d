"""REST endpoints that manage a project's files and datasets (portal/storage/manage.py): move or rename, delete,
make folders, list folders; delete or rename a dataset. Thin: resolve the project
(404 when it is not visible), call the action, serialise; refusals are StorageErrors (portal/api/errors.py)."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response

from portal.api import queries
from portal.api.base import SLUG_PARAM, ApiView
from portal.api.errors import NotFound
from portal.api.models import Scope
from portal.api.schema import BAD_INPUT, COMMON_ERRORS, NOT_FOUND, error
from portal.api.serializers import DatasetSerializer
from portal.storage import manage
from portal.storage import queries as storage_queries
from portal.storage.models import Folder, StoredFile

IN_USE = {409: error("in use: a dataset is this file or reads this folder, or a queued or running job was given it "
                     "(`in_use`: the message names them); or the path exists already (`exists`)")}


class MoveSerializer(serializers.Serializer):
    source = serializers.CharField(max_length=1024, help_text="a file or a folder of the project")
    destination = serializers.CharField(max_length=1024, help_text="its new path (must not exist); ending in / = "
                                        "into that folder, keeping its name")


class DeleteSerializer(serializers.Serializer):
    path = serializers.CharField(max_length=1024)
    recursive = serializers.BooleanField(required=False, default=False,
                                         help_text="path is a folder: delete it and every file under it")


class FolderSerializer(serializers.Serializer):
    path = serializers.CharField(max_length=1024)


class DatasetRenameSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=200, help_text="the dataset's new name")


class FileMoveView(ApiView):
    required_scopes = {"POST": Scope.SUBMIT}

    @extend_schema(parameters=[SLUG_PARAM], request=MoveSerializer,
                   responses={200: OpenApiResponse(description="`{path, files}`: the new path, files moved"),
                              **BAD_INPUT, **IN_USE, **COMMON_ERRORS, **NOT_FOUND},
                   summary="Rename or move a file or a folder (its bytes stay where they are: jobs are not affected)")
    def post(self, request, slug: str):
        project = queries.project_or_404(request.user, slug)
        body = MoveSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        path, moved = manage.move(request.user, project, body.validated_data["source"],
                                  body.validated_data["destination"])
        return Response({"project": project.slug, "path": path, "files": moved})


class FileDeleteView(ApiView):
    required_scopes = {"POST": Scope.SUBMIT}

    @extend_schema(parameters=[SLUG_PARAM], request=DeleteSerializer,
                   responses={200: OpenApiResponse(description="`{path, files, size}`: what was deleted"),
                              **BAD_INPUT, **IN_USE, **COMMON_ERRORS, **NOT_FOUND},
                   summary="Delete a file, or a folder with everything in it (recursive)")
    def post(self, request, slug: str):
        project = queries.project_or_404(request.user, slug)
        body = DeleteSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        path = body.validated_data["path"]
        if body.validated_data["recursive"]:
            files, size = manage.delete_folder(request.user, project, path)
            return Response({"project": project.slug, "path": path.rstrip("/"), "files": files, "size": size})
        if not StoredFile.objects.filter(project=project, path=path).exists() and (
                Folder.objects.filter(project=project, path=path.rstrip("/")).exists()
                or StoredFile.objects.filter(project=project, path__startswith=path.rstrip("/") + "/").exists()):
            raise NotFound(f"{path} is a folder: delete it with recursive true", field="path")
        stored = manage.delete_file(request.user, project, path)
        return Response({"project": project.slug, "path": stored.path, "files": 1, "size": stored.size})


class FolderListCreateView(ApiView):
    required_scopes = {"POST": Scope.SUBMIT}

    @extend_schema(parameters=[SLUG_PARAM], responses={200: OpenApiResponse(description="`{folders: [path, …]}`"),
                                                       **COMMON_ERRORS, **NOT_FOUND},
                   summary="A project's folders: those its files lie in, and empty ones made on purpose")
    def get(self, request, slug: str):
        project = queries.project_or_404(request.user, slug)
        files = StoredFile.objects.filter(project=project).values_list("path", flat=True)[:100_000]
        found = manage.folders_of([(project.slug, path) for path in files], Folder.objects.filter(project=project))
        return Response({"project": project.slug, "folders": [path for _, path in found]})

    @extend_schema(parameters=[SLUG_PARAM], request=FolderSerializer,
                   responses={201: FolderSerializer, **BAD_INPUT, 409: error("it exists already"), **COMMON_ERRORS,
                              **NOT_FOUND},
                   summary="Make a folder (kept while empty)")
    def post(self, request, slug: str):
        project = queries.project_or_404(request.user, slug)
        body = FolderSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        folder = manage.make_folder(request.user, project, body.validated_data["path"])
        return Response({"project": project.slug, "path": folder.path}, status=status.HTTP_201_CREATED)


def dataset_delete(request, slug: str, name: str):
    project = queries.project_or_404(request.user, slug)
    if not storage_queries.visible_datasets(request.user, project).filter(name=name).exists():
        raise NotFound(f"dataset {name!r} not found in project {project.slug}")
    dataset = manage.delete_dataset(request.user, project, name)
    return Response({"project": project.slug, "name": dataset.name, "deleted": True})


def dataset_rename(request, slug: str, name: str):
    project = queries.project_or_404(request.user, slug)
    if not storage_queries.visible_datasets(request.user, project).filter(name=name).exists():
        raise NotFound(f"dataset {name!r} not found in project {project.slug}")
    body = DatasetRenameSerializer(data=request.data)
    body.is_valid(raise_exception=True)
    dataset = manage.rename_dataset(request.user, project, name, body.validated_data["name"])
    return Response(DatasetSerializer(dataset, context={"request": request}).data)


DATASET_DELETE_SCHEMA = extend_schema(
    parameters=[SLUG_PARAM], request=None,
    responses={200: OpenApiResponse(description="`{name, deleted: true}`; the files stay"),
               409: error("a queued or running job uses it (`in_use`: the message names them)"),
               **COMMON_ERRORS, **NOT_FOUND},
    summary="Delete a dataset (its files stay); refused while a queued or running job uses it")
DATASET_RENAME_SCHEMA = extend_schema(
    parameters=[SLUG_PARAM], request=DatasetRenameSerializer,
    responses={200: DatasetSerializer, **BAD_INPUT,
               409: error("the name is taken, or a queued or running job uses it (`in_use`)"),
               **COMMON_ERRORS, **NOT_FOUND},
    summary="Rename a dataset; refused while a queued or running job uses it (it finds the data by name)")
