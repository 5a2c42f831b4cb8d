"""REST API v1. Thin: resolve slugs to objects the caller can see, call an action, serialise the answer. Jobs and
sweeps are here; who the caller is, projects, budgets, files and the catalog are in portal/api/project_views.py.

Business rules (what may be submitted, what it costs, who may cancel or upload) live in the actions of each
app; their refusals become JSON errors in portal.api.errors.
"""

from __future__ import annotations

from django.db.models import F
from django.http import FileResponse
from django.urls import reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.response import Response

from portal.api import queries
from portal.api.base import ApiView, ListView, query_int
from portal.api.errors import ApiError, NotFound
from portal.api.pagination import page_parameters
from portal.api.parsers import JSONParser
from portal.api.places import places_answer
from portal.api.schema import BAD_INPUT, COMMON_ERRORS, NOT_FOUND, error
from portal.api.serializers import (
    BatchSubmissionSerializer,
    BatchSubmitSerializer,
    JobEventSerializer,
    JobSerializer,
    JobSubmitSerializer,
    LogSerializer,
    SubmissionSerializer,
    SweepSerializer,
    SweepSubmitSerializer,
)
from portal.catalog import places
from portal.catalog.queries import budget_after
from portal.jobs import outputs
from portal.jobs.actions.batch import submit_jobs
from portal.jobs.actions.cancel import request_cancel, request_cancel_sweep
from portal.jobs.actions.submit import submit_job
from portal.jobs.actions.sweeps import submit_sweep
from portal.jobs.actions.validation import JobRequest
from portal.jobs.models import FINAL_STATES, JobState
from portal.jobs.outputs import request_output_refresh
from portal.jobs.queries import output_download, visible_jobs
from portal.samples.queries import as_api as gpu_use

LOG_CHUNK_BYTES = 1024 * 1024  # one answer of /logs/ carries at most this much; next_offset continues
MAX_IDEMPOTENCY_KEY = 128  # Job.idempotency_key's length


# -------------------------------------------------------------------------------------------------- jobs


class JobListCreateView(ListView):
    serializer_class = JobSerializer
    parser_classes = [JSONParser]

    def get_queryset(self):
        user, params = self.request.user, self.request.query_params
        jobs = visible_jobs(user)
        if params.get("project"):
            jobs = jobs.filter(project=queries.project_or_404(user, params["project"], field="project"))
        if params.get("state"):
            states = [s.strip() for s in params["state"].split(",") if s.strip()]
            unknown = [s for s in states if s not in JobState.values]
            if unknown:
                raise ApiError(f"unknown state {unknown[0]!r}: use {', '.join(JobState.values)} (comma-separated)",
                               field="state")
            jobs = jobs.filter(state__in=states)
        # Each job lists its outputs and datasets: one query for each, for the whole page; an array element's script
        # is its group's, read in the same statement.
        # …and what its GPUs do (portal/samples), in the same statement.
        return (jobs.select_related("group").prefetch_related("artifacts", "datasets")
                .annotate(gpu_state=F("samples__state"), gpu_summary=F("samples__summary")).order_by("-id"))

    @extend_schema(
        parameters=[
            OpenApiParameter("project", str, description="only jobs of this project (slug)"),
            OpenApiParameter("state", str, description="only jobs in these states, comma-separated, e.g. running,pending"),
        ],
        responses={200: JobSerializer(many=True), **BAD_INPUT, **COMMON_ERRORS, **NOT_FOUND},
        summary="Jobs of your projects, newest first",
    )
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    @extend_schema(
        request=JobSubmitSerializer,
        examples=[
            OpenApiExample("a script", request_only=True, value={
                "project": "vision", "name": "train-resnet", "hardware": "local-cpu", "nodes": 1,
                "walltime": "00:10:00", "script": "echo training\n", "env": {"EPOCHS": "3"}}),
            OpenApiExample("a dry run", request_only=True, value={
                "project": "vision", "name": "check", "hardware": "local-cpu", "walltime": "2h",
                "script": "python train.py\n", "dry_run": True}),
        ],
        parameters=[OpenApiParameter("Idempotency-Key", str, OpenApiParameter.HEADER,
                                     description="repeat a submit safely: the same key returns the first job (200)")],
        responses={
            201: SubmissionSerializer,
            200: OpenApiResponse(SubmissionSerializer, description="a dry run, or a job replayed by its Idempotency-Key"),
            **BAD_INPUT,
            402: error("the project's strict budget cannot cover the estimate (code budget_exceeded)"),
            415: error("the body must be JSON (Content-Type: application/json)"),
            **COMMON_ERRORS,
            **NOT_FOUND,
        },
        summary="Submit a job (or a dry run: the rendered script and the estimate, nothing recorded)",
    )
    def post(self, request):
        body = JobSubmitSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        user = request.user
        job_request = _job_request(user, data)
        project = job_request.project
        dry_run = data["dry_run"]
        submission = submit_job(user, job_request, dry_run=dry_run,
                                        idempotency_key=None if dry_run else _idempotency_key(request))
        answer = SubmissionSerializer(submission.job, context={
            "request": request, "submission": submission, "dry_run": dry_run,
            "budget_after": budget_after(project, submission.estimate) if dry_run else None,
            "places": _places(submission.job) if dry_run else None,
        }).data
        if dry_run or not submission.created:
            return Response(answer, status=status.HTTP_200_OK)
        return Response(answer, status=status.HTTP_201_CREATED,
                        headers={"Location": reverse("api-job-detail", args=[submission.job.pk])})


def _places(job) -> list[dict]:
    """The comparison before Run for a dry run's shape (docs/decisions/0018)."""
    hw = job.hardware
    shape = places.Shape(gpus=hw.gpus_per_node * job.nodes, walltime_seconds=job.walltime_seconds,
                         gpu_model=hw.gpu_model, nodes=job.nodes)
    return places_answer(job.project, shape, job.user)["places"]


def _job_request(user, data: dict, seen: dict | None = None) -> JobRequest:
    """The JobRequest a submit body describes; the project, hardware and software must be the user's to use.
    `seen`: the slugs already resolved for this request (a batch's jobs mostly name the same ones)."""
    seen = {} if seen is None else seen

    def lookup(kind: str, slug: str, find):
        if (kind, slug) not in seen:
            seen[kind, slug] = find()
        return seen[kind, slug]

    return JobRequest.from_data(
        data,
        project=lookup("project", data["project"], lambda: queries.project_or_404(user, data["project"], field="project")),
        hardware=lookup("hardware", data["hardware"], lambda: queries.hardware_or_404(user, data["hardware"]))
        if data.get("hardware") else None,
        software=lookup("software", data["software"], lambda: queries.software_or_404(user, data["software"]))
        if data.get("software") else None,
    )


class JobBatchCreateView(ApiView):
    parser_classes = [JSONParser]

    @extend_schema(
        request=BatchSubmitSerializer,
        examples=[OpenApiExample("two scripts", request_only=True, value={"jobs": [
            {"project": "vision", "name": "prep", "hardware": "local-cpu", "walltime": "00:10:00", "script": "echo a\n"},
            {"project": "vision", "name": "train", "hardware": "local-cpu", "walltime": "01:00:00",
             "script": "python train.py\n", "env": {"EPOCHS": "3"}}]})],
        parameters=[OpenApiParameter("Idempotency-Key", str, OpenApiParameter.HEADER,
                                     description="repeat a batch safely: the same key returns the jobs it recorded (200)")],
        responses={
            201: BatchSubmissionSerializer,
            200: OpenApiResponse(BatchSubmissionSerializer, description="a batch replayed by its Idempotency-Key"),
            **BAD_INPUT,
            402: error("a project's strict budget cannot cover its jobs of the batch (code budget_exceeded): "
                       "nothing was recorded"),
            415: error("the body must be JSON (Content-Type: application/json)"),
            **COMMON_ERRORS,
            **NOT_FOUND,
        },
        summary="Submit many jobs at once: each checked, priced and recorded as POST jobs/ would, all or none",
    )
    def post(self, request):
        body = BatchSubmitSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        user = request.user
        seen: dict = {}
        batch = submit_jobs(user, [_job_request(user, data, seen) for data in body.validated_data["jobs"]],
                            idempotency_key=_idempotency_key(request))
        answer = BatchSubmissionSerializer(batch, context={"request": request}).data
        return Response(answer, status=status.HTTP_201_CREATED if batch.created else status.HTTP_200_OK)


class SweepCreateView(ApiView):
    parser_classes = [JSONParser]

    @extend_schema(
        request=SweepSubmitSerializer,
        examples=[OpenApiExample("a learning-rate sweep", request_only=True, value={
            "project": "vision", "name": "lr-sweep", "hardware": "local-cpu", "walltime": "00:10:00",
            "script": 'python train.py --lr "$LR"\n', "sweep": {"LR": [0.1, 0.01, 0.001]}})],
        responses={
            201: SweepSerializer,
            200: OpenApiResponse(SweepSerializer, description="a dry run, or a sweep replayed by its Idempotency-Key"),
            **BAD_INPUT,
            402: error("the project's strict budget cannot cover the whole sweep (code budget_exceeded)"),
            415: error("the body must be JSON (Content-Type: application/json)"),
            **COMMON_ERRORS,
            **NOT_FOUND,
        },
        parameters=[OpenApiParameter("Idempotency-Key", str, OpenApiParameter.HEADER,
                                     description="repeat a submit safely: the same key returns the first sweep (200)")],
        summary="Submit a parameter sweep: a job per point, as one scheduler array where the scheduler has them",
    )
    def post(self, request):
        body = SweepSubmitSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        dry_run = data["dry_run"]
        sweep = submit_sweep(request.user, _job_request(request.user, data), data["sweep"], dry_run=dry_run,
                                     array=data["array"], idempotency_key=None if dry_run else _idempotency_key(request))
        # A recorded sweep answers as GET sweeps/{id}/ does, with the first page of its jobs (a replay too).
        shown = queries.SweepPage.drafted(sweep) if dry_run else queries.sweep_page(request, sweep.group,
                                                                                      created=sweep.created)
        # A dry run compares places for one point's shape (every point has it), as a job's dry run does.
        answer = SweepSerializer(shown, context={
            "request": request, "places": _places(sweep.jobs[0]) if dry_run else None}).data
        if dry_run or not sweep.created:
            return Response(answer, status=status.HTTP_200_OK)
        return Response(answer, status=status.HTTP_201_CREATED,
                        headers={"Location": reverse("api-sweep-detail", args=[sweep.group.pk])})


class SweepDetailView(ApiView):
    @extend_schema(parameters=page_parameters(queries.SWEEP_PAGE),
                   responses={200: SweepSerializer, **COMMON_ERRORS, **NOT_FOUND},
                   summary="One sweep and a page of its jobs (follow jobs_next for the rest)")
    def get(self, request, pk: int):
        group = queries.sweep_or_404(request.user, pk)
        return Response(SweepSerializer(queries.sweep_page(request, group), context={"request": request}).data)


class SweepCancelView(ApiView):
    @extend_schema(
        request=None,
        responses={202: OpenApiResponse(SweepSerializer, description="cancel requested for each job not ended yet"),
                   **COMMON_ERRORS, **NOT_FOUND},
        summary="Cancel every job of a sweep that has not ended",
    )
    def post(self, request, pk: int):
        group = queries.sweep_or_404(request.user, pk)
        request_cancel_sweep(group, request.user)  # every job of it not ended, on whichever page
        return Response(SweepSerializer(queries.sweep_page(request, group), context={"request": request}).data,
                        status=status.HTTP_202_ACCEPTED)


def _idempotency_key(request) -> str | None:
    key = request.headers.get("Idempotency-Key", "").strip()
    if not key:
        return None
    if len(key) > MAX_IDEMPOTENCY_KEY or not key.isprintable() or not key.isascii():
        raise ApiError(f"the Idempotency-Key header must be printable ASCII of at most {MAX_IDEMPOTENCY_KEY} characters",
                       field="Idempotency-Key")
    return key


class JobDetailView(ApiView):
    @extend_schema(responses={200: JobSerializer, **COMMON_ERRORS, **NOT_FOUND}, summary="One job",
                   description="With `gpu`: what its GPUs really do (summary, idle state, the idle rule, keeps).")
    def get(self, request, pk: int):
        job = queries.job_or_404(request.user, pk)
        # Beside the job, what its GPUs really do (portal/samples): summary, idle state, the rule, keeps.
        return Response({**JobSerializer(job, context={"request": request}).data, "gpu": gpu_use(job)})


class JobEventsView(ListView):
    """A job's history, oldest first: each event's cause (what to switch on), when, who or what, its words and
    its evidence."""

    serializer_class = JobEventSerializer

    def get_queryset(self):
        job = queries.job_or_404(self.request.user, self.kwargs["pk"])
        return job.events.select_related("actor").order_by("pk")

    @extend_schema(responses={200: JobEventSerializer(many=True), **COMMON_ERRORS, **NOT_FOUND},
                   summary="A job's history: what happened, why (its cause), when and by whom")
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)


class JobCancelView(ApiView):
    @extend_schema(
        request=None,
        responses={
            202: OpenApiResponse(JobSerializer, description="cancel requested: the scheduler is asked by a worker"),
            200: OpenApiResponse(JobSerializer, description="the job was still in the portal's queue and ended at once"),
            409: error("the job already ended"),
            **COMMON_ERRORS,
            **NOT_FOUND,
        },
        summary="Cancel a job",
    )
    def post(self, request, pk: int):
        job = request_cancel(queries.job_or_404(request.user, pk), request.user)
        job = queries.job_or_404(request.user, job.pk)  # with everything the answer shows
        code = status.HTTP_200_OK if job.state in FINAL_STATES else status.HTTP_202_ACCEPTED
        return Response(JobSerializer(job, context={"request": request}).data, status=code)


class JobLogsView(ApiView):
    @extend_schema(
        parameters=[
            OpenApiParameter("stream", str, enum=["stdout", "stderr"], description="stdout (default) or stderr"),
            OpenApiParameter("offset", int, description="byte offset to read from (next_offset of the last answer)"),
        ],
        responses={200: LogSerializer, **BAD_INPUT, **COMMON_ERRORS, **NOT_FOUND},
        summary="A job's output from an offset (follow it by passing next_offset back until complete)",
    )
    def get(self, request, pk: int):
        job = queries.job_or_404(request.user, pk)
        stream = request.query_params.get("stream") or "stdout"
        if stream not in ("stdout", "stderr"):
            raise ApiError(f"stream must be stdout or stderr, not {stream!r}", field="stream")
        offset = query_int(request, "offset", default=0)
        data, truncated, complete = outputs.output_of(job, stream, offset)
        chunk = data[:LOG_CHUNK_BYTES]
        more = len(data) > len(chunk)
        if more or not complete:
            # Never split a UTF-8 character between two answers; its rest comes with the next one.
            chunk = chunk[: _utf8_safe_end(chunk)]
        if not complete:
            request_output_refresh(job)  # a worker fetches new output from the cluster; this request never does
        # A job that ended before reaching a scheduler has no output and never will.
        nothing_to_come = job.state in FINAL_STATES and not job.scheduler_id
        return Response({
            "stream": stream,
            "offset": offset,
            "next_offset": offset + len(chunk),
            "data": chunk.decode("utf-8", "replace"),
            "complete": (complete and not more and len(chunk) == len(data)) or nothing_to_come,
            "truncated": truncated,
            "job_state": job.state,
        })


def _utf8_safe_end(chunk: bytes) -> int:
    """Length of `chunk` without a trailing, incomplete UTF-8 sequence."""
    for back in range(1, min(4, len(chunk)) + 1):
        byte = chunk[-back]
        if byte & 0xC0 == 0x80:  # a continuation byte: look further back for the lead byte
            continue
        if byte < 0x80:
            return len(chunk)
        need = 2 if byte & 0xE0 == 0xC0 else 3 if byte & 0xF0 == 0xE0 else 4 if byte & 0xF8 == 0xF0 else 1
        return len(chunk) - back if need > back else len(chunk)
    return len(chunk)


class JobOutputDownloadView(ApiView):
    def perform_content_negotiation(self, request, force=False):
        return super().perform_content_negotiation(request, force=True)

    @extend_schema(
        responses={(200, "application/octet-stream"): OpenApiTypes.BINARY,
                   302: OpenApiResponse(description="Location: a presigned GET of the object store"),
                   **COMMON_ERRORS, **NOT_FOUND},
        summary="Download a file the job left in outputs/ (with an object store: a redirect to a presigned URL)",
    )
    def get(self, request, pk: int, artifact_id: int):
        download = output_download(queries.job_or_404(request.user, pk), artifact_id)
        if download is None:
            raise NotFound("no such output of this job in the portal (too large ones stay on the cluster)")
        if download.url is not None:
            # The store serves the bytes (Range requests work), never the portal.
            return Response(status=status.HTTP_302_FOUND, headers={"Location": download.url})
        return FileResponse(download.open(), as_attachment=True, filename=download.filename,
                            content_type="application/octet-stream")
