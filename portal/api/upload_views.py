"""REST endpoints of direct uploads: create (or resume), sign parts, list parts, complete, abort.

Thin: resolve the project and the caller's own upload (404 otherwise), call portal.storage.uploads, serialise.
Refusals are StorageErrors, mapped to JSON by portal/api/errors.py.
"""

from __future__ import annotations

from django.conf import settings
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.permissions import IsAuthenticated
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.api.errors import NotFound
from portal.api.models import Scope
from portal.api.parsers import JSONRenderer
from portal.api.permissions import TokenScope
from portal.api.queries import project_or_404
from portal.api.schema import BAD_INPUT, COMMON_ERRORS, NOT_FOUND, error
from portal.api.serializers import FileSerializer, absolute_url
from portal.storage import batch_uploads, uploads
from portal.storage import queries as storage_queries
from portal.storage.models import UploadSession

SLUG = OpenApiParameter("slug", str, OpenApiParameter.PATH, description="the project's slug")
UPLOAD_ID = OpenApiParameter("upload_id", str, OpenApiParameter.PATH, description="the upload's id (a UUID)")
STORE_DOWN = {503: error("the object store could not be reached; try again")}
CONFLICT = {409: error("the upload is already complete or was aborted (`code` says which), a file exists at the "
                       "path (upload with overwrite), or this portal has no object store (`no_object_store`)")}


# An upload's states as the API reports them (settings' UploadStateEnum names them).
UPLOAD_STATES = ["open", "completed", "aborted", "refused"]


class UploadCreateSerializer(serializers.Serializer):
    path = serializers.CharField(max_length=1024, help_text="where in the project, e.g. data/train.csv")
    size = serializers.IntegerField(min_value=0, help_text="the file's size in bytes")
    sha256 = serializers.CharField(max_length=64, required=False, allow_blank=True,
                                   help_text="the whole file's SHA-256, 64 hexadecimal digits (or give it to complete)")
    overwrite = serializers.BooleanField(required=False, default=False, help_text="replace a file already at path")
    part_size = serializers.IntegerField(required=False, allow_null=True, min_value=uploads.MIN_PART_BYTES,
                                         max_value=uploads.MAX_PART_BYTES,
                                         help_text="the part size you want, in bytes (5 MiB to 5 GiB; grown when the "
                                                   "file would need more than 10,000 parts). Default: the site's "
                                                   "(KAKEHASHI_UPLOAD_PART_BYTES)")


class UploadSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    project = serializers.SlugField(source="project.slug")
    path = serializers.CharField()
    size = serializers.IntegerField()
    sha256 = serializers.CharField()
    part_size = serializers.IntegerField(help_text="every part but the last has exactly this many bytes")
    part_count = serializers.IntegerField()
    state = serializers.ChoiceField(choices=UPLOAD_STATES, help_text="refused: completed, then the whole object's "
                                    "SHA-256 was not the one given, so the file was removed")
    reason = serializers.CharField(help_text="why it was aborted or refused")
    resumed = serializers.SerializerMethodField(help_text="true: your open upload of the same file, to continue")
    created_at = serializers.DateTimeField()
    parts_url = serializers.SerializerMethodField()
    complete_url = serializers.SerializerMethodField()
    file = serializers.SerializerMethodField(help_text="the stored file, once completed")

    def get_resumed(self, session) -> bool:
        return bool(self.context.get("resumed"))

    def get_parts_url(self, session) -> str:
        return absolute_url(self.context, "api-upload-parts", session.project.slug, session.pk)

    def get_complete_url(self, session) -> str:
        return absolute_url(self.context, "api-upload-complete", session.project.slug, session.pk)

    def get_file(self, session) -> dict | None:
        if session.stored_file is None:
            return None
        return FileSerializer(session.stored_file, context=self.context).data


class PartChecksumSerializer(serializers.Serializer):
    number = serializers.IntegerField(min_value=1, max_value=uploads.MAX_PARTS)
    sha256 = serializers.CharField(max_length=44, help_text="the part's SHA-256 digest in base64")


class SignRequestSerializer(serializers.Serializer):
    parts = PartChecksumSerializer(many=True, help_text=f"1 to {uploads.MAX_SIGN_AT_ONCE} parts")


class SignedPartSerializer(serializers.Serializer):
    number = serializers.IntegerField()
    size = serializers.IntegerField(help_text="the bytes this part must have")
    url = serializers.URLField(help_text="PUT the part's bytes here, with the headers below")
    headers = serializers.DictField(child=serializers.CharField())


class SignedPartsSerializer(serializers.Serializer):
    parts = SignedPartSerializer(many=True)
    expires_in = serializers.IntegerField(help_text="seconds the URLs stay valid")


class HeldPartSerializer(serializers.Serializer):
    number = serializers.IntegerField()
    size = serializers.IntegerField()
    etag = serializers.CharField()
    sha256 = serializers.CharField(help_text="the SHA-256 (base64) signed for the part: compare it with your file's")


class PartEtagSerializer(serializers.Serializer):
    number = serializers.IntegerField(min_value=1, max_value=uploads.MAX_PARTS)
    etag = serializers.CharField(max_length=200)


class CompleteSerializer(serializers.Serializer):
    sha256 = serializers.CharField(max_length=64, required=False, allow_blank=True,
                                   help_text="the whole file's SHA-256 (needed unless given when the upload started)")
    parts = PartEtagSerializer(many=True, required=False, help_text="the ETag the store answered each part's PUT "
                               "with (optional: it picks the right copy of a part sent twice)")


class HeldPartsSerializer(serializers.Serializer):
    parts = HeldPartSerializer(many=True)


class _View(APIView):
    permission_classes = [IsAuthenticated, TokenScope]
    renderer_classes = [JSONRenderer]
    required_scopes = {"GET": Scope.SUBMIT, "POST": Scope.SUBMIT, "DELETE": Scope.SUBMIT}

    def upload(self, request, slug: str, upload_id) -> UploadSession:
        project = project_or_404(request.user, slug)
        session = storage_queries.visible_uploads(request.user).filter(project=project, pk=upload_id).first()
        if session is None:
            raise NotFound("no such upload of yours in this project")
        return session


class UploadCreateView(_View):
    @extend_schema(parameters=[SLUG], responses={200: UploadSerializer(many=True), **COMMON_ERRORS, **NOT_FOUND},
                   summary="Your unfinished uploads in the project: each holds its size of the quota until it is "
                           "completed or aborted (DELETE uploads/{id}/)")
    def get(self, request, slug: str):
        project = project_or_404(request.user, slug)
        sessions = storage_queries.visible_uploads(request.user).filter(project=project, state="open").order_by(
            "-last_activity_at")[:500]
        return Response({"results": [UploadSerializer(s, context={"request": request}).data for s in sessions]})

    @extend_schema(
        parameters=[SLUG], request=UploadCreateSerializer,
        responses={201: UploadSerializer, 200: OpenApiResponse(UploadSerializer, description="your open upload to "
                   "the same path with the same size (and sha256, if both give one): continue it"), **BAD_INPUT, **CONFLICT,
                   413: error("the project's storage quota cannot hold the file; the message says how much is left"),
                   **STORE_DOWN, **COMMON_ERRORS, **NOT_FOUND},
        summary="Start a direct upload to the object store (or resume yours to the same path and size)",
        description="The file never passes through the portal: sign each part (`parts_url`), PUT it to the store, "
                    "then `complete_url` with the whole file's `sha256` (or give it here). A file of 0 bytes is "
                    "complete at once. Part sizes are given by `part_size`; parts are numbered from 1. When "
                    "`resumed` is true, GET `parts_url` and send only the parts missing or not matching your file.",
        examples=[OpenApiExample("a 1 GiB file", request_only=True, value={
            "path": "datasets/train.tar", "size": 1073741824, "sha256": "9f86d0…(64 hex digits)"})],
    )
    def post(self, request, slug: str):
        project = project_or_404(request.user, slug)
        body = UploadCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        session, resumed = uploads.create_upload(request.user, project, **body.validated_data)
        answer = UploadSerializer(session, context={"request": request, "resumed": resumed}).data
        return Response(answer, status=status.HTTP_200_OK if resumed else status.HTTP_201_CREATED)


class UploadDetailView(_View):
    @extend_schema(parameters=[SLUG, UPLOAD_ID], responses={200: UploadSerializer, **COMMON_ERRORS, **NOT_FOUND},
                   summary="One of your uploads")
    def get(self, request, slug: str, upload_id):
        return Response(UploadSerializer(self.upload(request, slug, upload_id), context={"request": request}).data)

    @extend_schema(parameters=[SLUG, UPLOAD_ID], request=None,
                   responses={200: UploadSerializer, **CONFLICT, **STORE_DOWN, **COMMON_ERRORS, **NOT_FOUND},
                   summary="Abort an upload: the store drops its parts")
    def delete(self, request, slug: str, upload_id):
        session = uploads.abort_upload(request.user, self.upload(request, slug, upload_id))
        return Response(UploadSerializer(session, context={"request": request}).data)


class UploadPartsView(_View):
    @extend_schema(parameters=[SLUG, UPLOAD_ID], responses={200: HeldPartsSerializer, **CONFLICT, **STORE_DOWN,
                                                            **COMMON_ERRORS, **NOT_FOUND},
                   summary="The parts the store holds: when resuming, send the others (and any whose sha256 is not your file's)")
    def get(self, request, slug: str, upload_id):
        parts = uploads.uploaded_parts(request.user, self.upload(request, slug, upload_id))
        return Response({"parts": [{"number": p.number, "size": p.size, "etag": p.etag, "sha256": checksum}
                                   for p, checksum in parts]})

    @extend_schema(
        parameters=[SLUG, UPLOAD_ID], request=SignRequestSerializer,
        responses={200: SignedPartsSerializer, **BAD_INPUT, **CONFLICT, **COMMON_ERRORS, **NOT_FOUND},
        summary="Presigned PUTs for parts, each bound to the part's SHA-256",
        description="Send the headers given with each URL: `x-amz-checksum-sha256` is signed, so the store "
                    "refuses a part whose bytes do not match it (400 BadDigest) and a PUT without it (403).",
    )
    def post(self, request, slug: str, upload_id):
        session = self.upload(request, slug, upload_id)
        body = SignRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        signed = uploads.sign_parts(request.user, session, [dict(p) for p in body.validated_data["parts"]])
        return Response({"parts": signed, "expires_in": settings.KAKEHASHI_UPLOAD_URL_SECONDS})


class UploadCompleteView(_View):
    @extend_schema(
        parameters=[SLUG, UPLOAD_ID], request=CompleteSerializer,
        responses={201: FileSerializer, 400: error("parts missing or of the wrong size, or a part that does not match "
                                                   "its checksum (the upload stays open: send it again)"),
                   409: error("already completed (`already_completed`) or aborted, or a file appeared at the path"),
                   413: error("the quota no longer holds the file (the upload is aborted)"),
                   **STORE_DOWN, **COMMON_ERRORS, **NOT_FOUND},
        summary="Complete an upload: sizes and checksums are checked, then the file is listed",
        description="A file of one part is verified here and ready at once. A file of several parts is listed with "
                    "`state: verifying` while a worker hashes the joined object in the store: follow the upload "
                    "(`GET uploads/{id}/`) until its file is `ready`, or the upload is `refused` (the SHA-256 was "
                    "not the file's: the object is deleted and `reason` says so).",
    )
    def post(self, request, slug: str, upload_id):
        session = self.upload(request, slug, upload_id)
        body = CompleteSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        etags = {part["number"]: part["etag"] for part in body.validated_data.get("parts", [])}
        stored = uploads.complete_upload(request.user, session, body.validated_data.get("sha256") or None, etags)
        return Response(FileSerializer(stored, context={"request": request}).data, status=status.HTTP_201_CREATED)


# ------------------------------------------------------------------------------ many small files at once


class BatchFileSerializer(serializers.Serializer):
    path = serializers.CharField(max_length=1024)
    size = serializers.IntegerField(min_value=0, max_value=batch_uploads.MAX_BATCH_FILE)
    sha256 = serializers.CharField(max_length=64, help_text="the file's SHA-256, 64 hexadecimal digits")


class BatchCreateSerializer(serializers.Serializer):
    files = BatchFileSerializer(many=True, help_text=f"1 to {batch_uploads.MAX_BATCH} files of at most "
                                f"{batch_uploads.MAX_BATCH_FILE // 2**20} MiB each")
    overwrite = serializers.BooleanField(required=False, default=False, help_text="replace files already at the paths")


class BatchUploadSerializer(serializers.Serializer):
    path = serializers.CharField()
    state = serializers.ChoiceField(choices=["upload", "present"], help_text="present: the project holds this file "
                                    "with this size and SHA-256 already; nothing to send")
    id = serializers.UUIDField(required=False, help_text="the upload's id, to complete it")
    url = serializers.URLField(required=False, help_text="PUT the whole file here, with the headers below")
    headers = serializers.DictField(child=serializers.CharField(), required=False)
    size = serializers.IntegerField(required=False)


class BatchCreatedSerializer(serializers.Serializer):
    uploads = BatchUploadSerializer(many=True)
    expires_in = serializers.IntegerField(help_text="seconds the URLs stay valid")


class BatchCompleteSerializer(serializers.Serializer):
    ids = serializers.ListField(child=serializers.CharField(max_length=64), min_length=1,
                                max_length=batch_uploads.MAX_BATCH, help_text="the ids the batch gave")


class BatchCompletedSerializer(serializers.Serializer):
    files = FileSerializer(many=True)
    missing = serializers.ListField(child=serializers.UUIDField(), help_text="uploads whose object the store does not "
                                    "hold yet: PUT them again (create the batch again for fresh URLs), then complete")


class BatchCreateView(_View):
    @extend_schema(
        parameters=[SLUG], request=BatchCreateSerializer,
        responses={201: BatchCreatedSerializer, **BAD_INPUT, **CONFLICT,
                   413: error("the project's storage quota cannot hold the batch"), **STORE_DOWN, **COMMON_ERRORS,
                   **NOT_FOUND},
        summary="Start direct uploads of many small files at once (a dataset folder): one presigned PUT each",
        description="All or none: paths, quota and the file/folder rule are checked for the whole batch. Each URL "
                    "is bound to its file's SHA-256 (send the headers given: the store refuses other bytes). A file "
                    "the project already holds with the same size and SHA-256 is `present`: nothing to send. "
                    "Sent again, the same batch resumes your open uploads with fresh URLs. Then POST the ids to "
                    "`uploads/batch/complete/`.",
    )
    def post(self, request, slug: str):
        project = project_or_404(request.user, slug)
        body = BatchCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        answers = batch_uploads.create_batch(request.user, project, [dict(f) for f in body.validated_data["files"]],
                                             overwrite=body.validated_data["overwrite"])
        for answer in answers:
            answer.pop("file", None)
        return Response({"uploads": answers, "expires_in": settings.KAKEHASHI_UPLOAD_URL_SECONDS},
                        status=status.HTTP_201_CREATED)


class BatchCompleteView(_View):
    @extend_schema(
        parameters=[SLUG], request=BatchCompleteSerializer,
        responses={200: BatchCompletedSerializer, **BAD_INPUT, **CONFLICT, 413: error("the quota no longer holds them"),
                   **STORE_DOWN, **COMMON_ERRORS, **NOT_FOUND},
        summary="Complete uploads of a batch: each file whose object the store holds is listed, ready",
    )
    def post(self, request, slug: str):
        project = project_or_404(request.user, slug)
        body = BatchCompleteSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        files, missing = batch_uploads.complete_batch(request.user, project, body.validated_data["ids"])
        return Response({"files": FileSerializer(files, many=True, context={"request": request}).data,
                         "missing": missing})
