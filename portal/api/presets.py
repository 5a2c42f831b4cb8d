"""GET /api/v1/presets/?project=: the one-click hardware choices ("1 GPU", "Run on 8×A100") resolved for a project,
as the job form shows them; the Lab dialog and scripts pick from these."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.fields import get_attribute
from rest_framework.response import Response

from portal.api import queries
from portal.api.base import PROJECT_PARAM, ApiView
from portal.api.errors import ApiError
from portal.api.schema import BAD_INPUT, COMMON_ERRORS, NOT_FOUND
from portal.api.serializers import MoneyField, money
from portal.budgets.queries import budget_of
from portal.catalog.queries import presets_for, price_per_node_hour


class SlugsField(serializers.ListField):
    """A list of objects, each shown by the slug found at `path` ("slug", "cluster.slug")."""

    def __init__(self, *, path: str = "slug", **kwargs) -> None:
        self.path = path.split(".")
        super().__init__(child=serializers.SlugField(), **kwargs)

    def to_representation(self, data) -> list[str]:
        return super().to_representation([get_attribute(item, self.path) for item in data])


class PriceField(MoneyField):
    """A PresetChoice's cheapest hardware's node-hour in the unit of the project's budget (the context's `budget`)."""

    def to_representation(self, choice) -> dict | None:
        return money(price_per_node_hour(choice.best, self.context["budget"])) if choice.best else None


# A catalog.queries.PresetChoice; the context holds the project's `budget` (prices are in its unit).
class PresetSerializer(serializers.Serializer):
    slug = serializers.SlugField(source="preset.slug")
    label = serializers.CharField(source="preset.label")
    nodes = serializers.IntegerField(source="preset.nodes")
    gpus_per_node = serializers.IntegerField(source="preset.gpus_per_node")
    gpu_model = serializers.CharField(source="preset.gpu_model", allow_blank=True, help_text="blank: any GPU model")
    hardware = serializers.SlugField(source="best.slug", allow_null=True,
                                     help_text="the cheapest matching hardware; null: none for this project")
    options = SlugsField(help_text="every matching hardware, cheapest first")
    clusters = SlugsField(source="options", path="cluster.slug", help_text="where each of `options` runs (its cluster)")
    price_per_node_hour = PriceField(source="*", read_only=False, allow_null=True,
                                     help_text="of `hardware`, in the unit of the project's budget")


class PresetListView(ApiView):
    @extend_schema(parameters=[PROJECT_PARAM], responses={200: PresetSerializer(many=True), **BAD_INPUT, **COMMON_ERRORS,
                                                           **NOT_FOUND},
                   summary="Hardware presets resolved for a project (cheapest matching hardware first)")
    def get(self, request):
        slug = request.query_params.get("project")
        if not slug:
            raise ApiError("say which project the presets are for: ?project=<slug>", field="project")
        project = queries.project_or_404(request.user, slug, field="project")
        return Response(PresetSerializer(presets_for(project), many=True, context={"budget": budget_of(project)}).data)
