"""GET /api/v1/places/?project=&gpus=&hours=: the one comparison before Run, for scripts and the CLI
(`kakehashi places`), as the job form shows it (portal/catalog/places.py). A dry run's answer carries the same
rows for the shape it describes."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

from django.core.exceptions import ValidationError
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.response import Response

from portal.api import queries
from portal.api.base import ApiView, query_int
from portal.api.errors import ApiError
from portal.api.schema import BAD_INPUT, COMMON_ERRORS, NOT_FOUND
from portal.api.serializers import PlaceSerializer
from portal.catalog import places
from portal.jobs.actions.validation import parse_walltime

MAX_HOURS = Decimal(24 * 366)


def places_answer(project, shape: places.Shape, user=None) -> dict:
    return {"shape": shape.label, "places": PlaceSerializer(places.places_for(project, shape, user), many=True).data}


class PlacesAnswerSerializer(serializers.Serializer):
    shape = serializers.CharField(help_text='the shape compared, e.g. "8×A100, 2 h"')
    places = PlaceSerializer(many=True, help_text="where the caller can run first, each part cheapest first (in the "
                                                  "reporting unit)")


def _gpus(raw: str) -> tuple[int, str]:
    """`8` or `a100:8` → (8, "a100")."""
    model, _, count = raw.rpartition(":")
    if not count.isdigit():
        raise ApiError(f"gpus must be a number or MODEL:NUMBER (8, a100:8), not {raw!r}", field="gpus")
    if model and not model.replace("-", "").replace("_", "").isalnum():
        raise ApiError(f"{model!r} is not a GPU model name", field="gpus")
    return int(count), model


def _walltime_seconds(params) -> int:
    if params.get("walltime"):
        try:
            seconds = parse_walltime(params["walltime"])
        except ValidationError as exc:
            raise ApiError(exc.messages[0], field="walltime") from None
        if seconds > MAX_HOURS * 3600:  # found by the hostile walk: a walltime of 10**30 s overflowed the pricing
            raise ApiError(f"walltime must be at most {MAX_HOURS} hours", field="walltime")
        return seconds
    raw = params.get("hours", "1")
    try:
        hours = Decimal(raw)
    except InvalidOperation:
        raise ApiError(f"hours must be a number, not {raw!r}", field="hours") from None
    if not hours.is_finite() or hours <= 0 or hours > MAX_HOURS:
        raise ApiError(f"hours must be more than 0 and at most {MAX_HOURS}", field="hours")
    return max(int(hours * 3600), 1)


class PlacesView(ApiView):
    @extend_schema(
        parameters=[
            OpenApiParameter("project", str, required=True, description="the project (slug) the job would run in"),
            OpenApiParameter("gpus", str, description="GPUs in all: 8, or with the model asked for, a100:8 (default 0)"),
            OpenApiParameter("hours", str, description="walltime in hours, e.g. 2 or 0.5 (default 1)"),
            OpenApiParameter("walltime", str, description="instead of hours: 01:30:00, 90m, 2h"),
            OpenApiParameter("nodes", int, description="CPU jobs (gpus=0): how many nodes (default 1)"),
        ],
        responses={200: PlacesAnswerSerializer, **BAD_INPUT, **COMMON_ERRORS, **NOT_FOUND},
        summary="Every place a project may run a shape, with its cost and how busy it is, cheapest first",
    )
    def get(self, request):
        params = request.query_params
        if not params.get("project"):
            raise ApiError("say which project the job is for: ?project=<slug>", field="project")
        project = queries.project_or_404(request.user, params["project"], field="project")
        gpus, model = _gpus(params.get("gpus", "0"))
        try:
            shape = places.Shape(gpus=gpus, walltime_seconds=_walltime_seconds(params), gpu_model=model,
                                 nodes=query_int(request, "nodes", 1, minimum=1))
        except places.BadShape as exc:
            raise ApiError(str(exc), field=exc.field) from None
        return Response(places_answer(project, shape, request.user))
