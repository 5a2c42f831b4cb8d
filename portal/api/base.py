"""What every API view shares: JSON only, token scopes checked, and the helpers for query parameters."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiExample, OpenApiParameter
from rest_framework import generics
from rest_framework.permissions import IsAuthenticated
from rest_framework.views import APIView

from portal.api.errors import ApiError
from portal.api.parsers import JSONRenderer
from portal.api.permissions import TokenScope


class ApiMixin:
    permission_classes = [IsAuthenticated, TokenScope]
    renderer_classes = [JSONRenderer]


class ApiView(ApiMixin, APIView):
    pass


class ListView(ApiMixin, generics.ListAPIView):
    pass


def query_int(request, name: str, default: int | None = None, minimum: int = 0) -> int | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ApiError(f"{name} must be a whole number, not {raw!r}", field=name) from None
    if value < minimum:
        raise ApiError(f"{name} must be at least {minimum}", field=name)
    return value


PROJECT_PARAM = OpenApiParameter("project", str, description="a project slug: only what this project may use")
SLUG_PARAM = OpenApiParameter("slug", str, OpenApiParameter.PATH, description="the project's slug",
                              examples=[OpenApiExample("a project", value="vision")])


