"""JSON answers for URLs under /api/ that match no endpoint."""

from __future__ import annotations

from django.http import JsonResponse
from django.urls import Resolver404, resolve
from django.views.decorators.csrf import csrf_exempt


@csrf_exempt  # it changes nothing; without this a POST would get the CSRF middleware's HTML page instead
def not_found(request, *args, **kwargs) -> JsonResponse:
    # The catch-all also hides Django's APPEND_SLASH redirect, so say what the right URL would have been.
    if not request.path.endswith("/"):
        try:
            match = resolve(request.path + "/")
        except Resolver404:
            match = None
        if match is not None and match.func is not not_found:
            return JsonResponse(
                {"detail": f"no endpoint at {request.path}: API URLs end with '/', use {request.path}/", "code": "not_found"},
                status=404,
            )
    return JsonResponse({"detail": f"no endpoint at {request.path}; see /api/docs/", "code": "not_found"}, status=404)
