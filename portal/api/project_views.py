"""REST API v1, what a caller can see and use: who they are, their projects with budgets and files, and the
clusters, hardware and software they may run on. Thin, as portal/api/views.py (the jobs) is.
"""

from __future__ import annotations

from decimal import Decimal

from django.http import FileResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.parsers import MultiPartParser
from rest_framework.response import Response

from portal.api import file_views, queries
from portal.api.base import PROJECT_PARAM, SLUG_PARAM, ApiView, ListView, query_int
from portal.api.errors import NotFound
from portal.api.models import ApiToken, Scope
from portal.api.permissions import ANY_SCOPE
from portal.api.schema import BAD_INPUT, COMMON_ERRORS, NOT_FOUND, error
from portal.api.serializers import (
    BudgetSerializer,
    ClusterSerializer,
    DatasetCreateSerializer,
    DatasetSerializer,
    FileSerializer,
    FileUploadSerializer,
    HardwareSerializer,
    MeSerializer,
    ProjectSerializer,
    SoftwareSerializer,
)
from portal.budgets import actions as budgets
from portal.budgets.queries import budget_of
from portal.catalog.queries import price_per_node_hour
from portal.storage import actions as storage
from portal.storage import datasets
from portal.storage import queries as storage_queries
from portal.storage.queries import visible_files

# ----------------------------------------------------------------------------------------------- catalog


class MeView(ApiView):
    required_scopes = {"GET": ANY_SCOPE}  # so `kakehashi login` can check a submit-only token too

    @extend_schema(responses={200: MeSerializer, **COMMON_ERRORS}, summary="Who this token belongs to")
    def get(self, request):
        token = request.auth if isinstance(request.auth, ApiToken) else None
        return Response(MeSerializer({"user": request.user, "token": token}).data)


@extend_schema(responses={200: ProjectSerializer(many=True), **COMMON_ERRORS}, summary="Projects you can see, with your role")
class ProjectListView(ListView):
    serializer_class = ProjectSerializer

    def get_queryset(self):
        return queries.projects_with_role(self.request.user)


class ProjectDetailView(ApiView):
    @extend_schema(parameters=[SLUG_PARAM], responses={200: ProjectSerializer, **COMMON_ERRORS, **NOT_FOUND}, summary="One project")
    def get(self, request, slug: str):
        project = queries.project_or_404(request.user, slug)
        project = queries.projects_with_role(request.user).get(pk=project.pk)
        return Response(ProjectSerializer(project, context={"request": request}).data)


@extend_schema(responses={200: ClusterSerializer(many=True), **COMMON_ERRORS}, summary="Clusters of your projects")
class ClusterListView(ListView):
    serializer_class = ClusterSerializer

    def get_queryset(self):
        return queries.visible_clusters(self.request.user).select_related("health").order_by("slug")


@extend_schema(
    parameters=[
        PROJECT_PARAM,
        OpenApiParameter("gpu_model", str, description="e.g. a100 (case-insensitive)"),
        OpenApiParameter("gpus_per_node", int, description="GPUs per node, e.g. 8"),
    ],
    responses={200: HardwareSerializer(many=True), **BAD_INPUT, **COMMON_ERRORS, **NOT_FOUND},
    summary="Hardware your projects may use (with ?project=: cheapest first, priced in the budget's unit)",
)
class HardwareListView(ListView):
    serializer_class = HardwareSerializer

    def get_queryset(self):
        user, params = self.request.user, self.request.query_params
        project = queries.project_or_404(user, params["project"], field="project") if params.get("project") else None
        hardware = queries.usable_hardware(user, project)
        if params.get("gpu_model"):
            hardware = hardware.filter(gpu_model__iexact=params["gpu_model"])
        gpus = query_int(self.request, "gpus_per_node")
        if gpus is not None:
            hardware = hardware.filter(gpus_per_node=gpus)
        self.prices = None
        if project is None:
            return hardware
        budget = budget_of(project)
        self.prices = {hw.pk: price_per_node_hour(hw, budget) for hw in hardware}
        infinite = Decimal("Infinity")
        return sorted(hardware, key=lambda hw: (self.prices[hw.pk].amount if self.prices[hw.pk] else infinite, hw.slug))

    def get_serializer_context(self):
        return {**super().get_serializer_context(), "prices": getattr(self, "prices", None)}


@extend_schema(parameters=[PROJECT_PARAM], responses={200: SoftwareSerializer(many=True), **COMMON_ERRORS, **NOT_FOUND},
               summary="Software your projects may use")
class SoftwareListView(ListView):
    serializer_class = SoftwareSerializer

    def get_queryset(self):
        user, slug = self.request.user, self.request.query_params.get("project")
        project = queries.project_or_404(user, slug, field="project") if slug else None
        return queries.usable_software(user, project)


# ----------------------------------------------------------------------------------------------- budgets


class BudgetView(ApiView):
    @extend_schema(parameters=[SLUG_PARAM], responses={200: BudgetSerializer, **COMMON_ERRORS, **NOT_FOUND},
                   summary="A project's budget: amount, reserved, spent, available (budget null when none is set)")
    def get(self, request, slug: str):
        project = queries.project_or_404(request.user, slug)
        budget = budget_of(project)
        summary = budgets.summary(budget) if budget else None
        return Response(BudgetSerializer({"project": project, "budget": budget, "summary": summary}).data)


# ------------------------------------------------------------------------------------------------- files


class FileListCreateView(ListView):
    serializer_class = FileSerializer
    parser_classes = [MultiPartParser]
    required_scopes = {"POST": Scope.SUBMIT}

    def get_queryset(self):
        project = queries.project_or_404(self.request.user, self.kwargs["slug"])
        return visible_files(self.request.user).filter(project=project).order_by("path")

    @extend_schema(parameters=[SLUG_PARAM], responses={200: FileSerializer(many=True), **COMMON_ERRORS, **NOT_FOUND},
                   summary="Files in a project's shared storage")
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    @extend_schema(
        parameters=[SLUG_PARAM],
        request={"multipart/form-data": FileUploadSerializer},
        responses={
            201: FileSerializer,
            200: OpenApiResponse(FileSerializer, description="an existing file replaced (overwrite)"),
            **BAD_INPUT,
            409: error("a file already exists at this path (upload with overwrite to replace it)"),
            413: error("the file is larger than KAKEHASHI_MAX_UPLOAD_BYTES"),
            415: error("the body must be multipart/form-data"),
            **COMMON_ERRORS,
            **NOT_FOUND,
        },
        summary="Upload a file (multipart field `file`, optional `path` and `overwrite`)",
    )
    def post(self, request, slug: str):
        project = queries.project_or_404(request.user, slug)
        # Before request.data is touched: a body over the limit is refused without being read.
        storage.check_declared_size(request.META.get("CONTENT_LENGTH"))
        body = FileUploadSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        stored, created = storage.store_file(request.user, project, body.validated_data["file"],
                                             path=body.validated_data["path"], overwrite=body.validated_data["overwrite"])
        answer = FileSerializer(queries.file_or_404(request.user, project, stored.pk), context={"request": request}).data
        return Response(answer, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)


class FileDownloadView(ApiView):
    def perform_content_negotiation(self, request, force=False):
        # Any Accept header may ask for the bytes; errors are still JSON.
        return super().perform_content_negotiation(request, force=True)

    @extend_schema(
        parameters=[SLUG_PARAM],
        responses={(200, "application/octet-stream"): OpenApiTypes.BINARY,
                   302: OpenApiResponse(description="Location: a presigned GET of the object store"),
                   409: error("the file is still being verified (`verifying`): its whole-file SHA-256 is checked "
                              "after upload"),
                   **COMMON_ERRORS, **NOT_FOUND},
        summary="Download a file (with an object store: a redirect to a short-lived presigned URL; Range works)",
    )
    def get(self, request, slug: str, pk: int):
        project = queries.project_or_404(request.user, slug)
        stored = queries.file_or_404(request.user, project, pk)
        url = storage.download_url(request.user, stored)
        if url is not None:  # the bytes come from the store itself, never through the portal
            return Response(status=status.HTTP_302_FOUND, headers={"Location": url, "X-Checksum-SHA256": stored.sha256})
        response = FileResponse(storage.open_file(request.user, stored), as_attachment=True, filename=stored.filename,
                                content_type="application/octet-stream")
        response["X-Checksum-SHA256"] = stored.sha256
        return response




class DatasetListCreateView(ListView):
    serializer_class = DatasetSerializer
    required_scopes = {"POST": Scope.SUBMIT}

    def get_queryset(self):
        project = queries.project_or_404(self.request.user, self.kwargs["slug"])
        return storage_queries.visible_datasets(self.request.user, project)

    @extend_schema(parameters=[SLUG_PARAM], responses={200: DatasetSerializer(many=True), **COMMON_ERRORS, **NOT_FOUND},
                   summary="A project's datasets (what jobs attach by name)")
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    @extend_schema(
        parameters=[SLUG_PARAM], request=DatasetCreateSerializer,
        responses={201: DatasetSerializer, **BAD_INPUT, 409: error("the project has a dataset of this name, or its file is still being verified"),
                   **COMMON_ERRORS, **NOT_FOUND},
        summary="Name a file or folder of the project as a dataset, or (project admins) register a cluster path, "
                "which a worker then checks on the cluster (state `checking`, then `ready` or `refused`)",
    )
    def post(self, request, slug: str):
        project = queries.project_or_404(request.user, slug)
        body = DatasetCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        cluster = queries.visible_clusters(request.user).filter(slug=data["cluster"]).first() if data["cluster"] else None
        if data["cluster"] and cluster is None:
            raise NotFound(f"cluster {data['cluster']!r} not found", field="cluster")
        dataset = datasets.create_dataset(request.user, project, name=data["name"], path=data["path"],
                                          prefix=data["prefix"], cluster=cluster, cluster_path=data["cluster_path"])
        return Response(DatasetSerializer(dataset, context={"request": request}).data, status=status.HTTP_201_CREATED)


class DatasetDetailView(ApiView):
    required_scopes = {"DELETE": Scope.SUBMIT, "PATCH": Scope.SUBMIT}

    @file_views.DATASET_DELETE_SCHEMA
    def delete(self, request, slug: str, name: str):
        return file_views.dataset_delete(request, slug, name)

    @file_views.DATASET_RENAME_SCHEMA
    def patch(self, request, slug: str, name: str):
        return file_views.dataset_rename(request, slug, name)

    @extend_schema(parameters=[SLUG_PARAM], responses={200: DatasetSerializer, **COMMON_ERRORS, **NOT_FOUND},
                   summary="One dataset, by name (a registered path's check result included)")
    def get(self, request, slug: str, name: str):
        project = queries.project_or_404(request.user, slug)
        dataset = storage_queries.visible_datasets(request.user, project).filter(name=name).first()
        if dataset is None:
            raise NotFound(f"dataset {name!r} not found in project {project.slug}")
        return Response(DatasetSerializer(dataset, context={"request": request}).data)
