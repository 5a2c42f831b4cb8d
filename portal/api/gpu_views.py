"""A job's GPU use through the API: its samples (the series the job page charts) and Keep running. The summary
itself rides on `GET jobs/{id}/` (JobDetailView)."""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.response import Response

from portal.api import queries
from portal.api.base import ApiView
from portal.api.errors import ApiError
from portal.api.schema import BAD_INPUT, COMMON_ERRORS, NOT_FOUND, error
from portal.samples import queries as gpu
from portal.samples.actions import KeepRefused, keep
from portal.samples.models import JobSamples


class JobSamplesView(ApiView):
    @extend_schema(responses={200: OpenApiTypes.OBJECT, **COMMON_ERRORS, **NOT_FOUND},
                   summary="A job's samples: each GPU's utilisation and memory, each node's CPU and memory, over time",
                   description=(
                       "`gpus`: per device (`node/index`) its points `[t, dt, util_mean, util_max, memory_mib, "
                       "power_w]` (t in epoch seconds, covering dt seconds; null where nvidia-smi said [N/A]); "
                       "`cpu`: per node `[t, dt, cpu_percent, rss_mib]`; `idle_periods`: the stretches every GPU "
                       "stayed below the rule's threshold. Bounded: older points are merged (means kept, maxima "
                       "kept)."))
    def get(self, request, pk: int):
        job = queries.job_or_404(request.user, pk)
        samples = JobSamples.objects.filter(job=job).first()
        data = (samples.series if samples else None) or {}
        return Response({
            "interval": data.get("interval"),
            "gpus": {device: {"uuid": d.get("uuid"), "memory_total_mib": d.get("total"), "points": d.get("p") or []}
                     for device, d in sorted((data.get("gpus") or {}).items())},
            "cpu": {node: c.get("p") or [] for node, c in sorted((data.get("cpu") or {}).items())},
            "nodes": data.get("nodes") or {},
            "idle_periods": gpu.job_gpu(job, with_series=False)["idle_periods"],
        })


class JobKeepView(ApiView):
    @extend_schema(request={"application/json": {"type": "object", "properties": {"hours": {"type": "number"}},
                                                 "required": ["hours"]}},
                   responses={200: OpenApiResponse(OpenApiTypes.OBJECT, description="the job's GPU use, kept"),
                              409: error("the job is not running, or the hours are outside the rule's bound"),
                              **BAD_INPUT, **COMMON_ERRORS, **NOT_FOUND},
                   summary="Keep an idle job running for N hours (its owner only; bounded by the project's rule)")
    def post(self, request, pk: int):
        job = queries.job_or_404(request.user, pk)
        hours = request.data.get("hours") if isinstance(request.data, dict) else None
        if isinstance(hours, bool) or not isinstance(hours, int | float):
            raise ApiError("hours must be a number", field="hours")
        try:
            keep(job, request.user, float(hours))
        except PermissionDenied as exc:
            raise ApiError(str(exc), status_code=403, code="permission_denied") from None
        except KeepRefused as exc:
            raise ApiError(str(exc), status_code=409, code="conflict", field="hours") from None
        return Response(gpu.as_api(job))
