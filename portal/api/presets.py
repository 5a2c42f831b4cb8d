"""GET /api/v1/presets/?project=: the one-click hardware choices ("1 GPU", "Run on 8×A100") resolved for a project,
as the job form shows them; the Lab dialog and scripts pick from these."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response

from portal.api import queries
from portal.api.base import PROJECT_PARAM, ApiView
from portal.api.errors import ApiError
from portal.api.schema import BAD_INPUT, COMMON_ERRORS, NOT_FOUND
from portal.api.serializers import MoneySerializer, money
from portal.budgets.queries import budget_of
from portal.catalog.queries import presets_for, price_per_node_hour


class PresetSerializer(serializers.Serializer):
    slug = serializers.SlugField()
    label = serializers.CharField()
    nodes = serializers.IntegerField()
    gpus_per_node = serializers.IntegerField()
    gpu_model = serializers.CharField(allow_blank=True, help_text="blank: any GPU model")
    hardware = serializers.SlugField(allow_null=True, help_text="the cheapest matching hardware; null: none for this project")
    options = serializers.ListField(child=serializers.SlugField(), help_text="every matching hardware, cheapest first")
    clusters = serializers.ListField(child=serializers.SlugField(), help_text="where each of `options` runs (its cluster)")
    price_per_node_hour = MoneySerializer(allow_null=True, help_text="of `hardware`, in the unit of the project's budget")


class PresetListView(ApiView):
    @extend_schema(parameters=[PROJECT_PARAM], responses={200: PresetSerializer(many=True), **BAD_INPUT, **COMMON_ERRORS,
                                                           **NOT_FOUND},
                   summary="Hardware presets resolved for a project (cheapest matching hardware first)")
    def get(self, request):
        slug = request.query_params.get("project")
        if not slug:
            raise ApiError("say which project the presets are for: ?project=<slug>", field="project")
        project = queries.project_or_404(request.user, slug, field="project")
        budget = budget_of(project)
        return Response([{
            "slug": choice.preset.slug,
            "label": choice.preset.label,
            "nodes": choice.preset.nodes,
            "gpus_per_node": choice.preset.gpus_per_node,
            "gpu_model": choice.preset.gpu_model,
            "hardware": choice.best.slug if choice.best else None,
            "options": [hw.slug for hw in choice.options],
            "clusters": [hw.cluster.slug for hw in choice.options],
            "price_per_node_hour": money(price_per_node_hour(choice.best, budget)) if choice.best else None,
        } for choice in presets_for(project)])
