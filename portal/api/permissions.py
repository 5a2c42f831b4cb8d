"""Token scopes: read for GET, submit for POSTs that spend or store (jobs, cancel, upload), admin for anything.

Scopes only narrow what a token may do; the caller's role in each project still decides (portal.projects.access).
A browser session carries no token and is limited by the role alone.
"""

from __future__ import annotations

from rest_framework import exceptions
from rest_framework.permissions import SAFE_METHODS, BasePermission

from portal.api.models import Scope

ANY_SCOPE = "any"  # endpoints about the token itself (GET /me/): every valid token may call them


def required_scope(request, view) -> str:
    by_method = getattr(view, "required_scopes", None) or {}
    if request.method in by_method:
        return by_method[request.method]
    return Scope.READ if request.method in SAFE_METHODS else Scope.SUBMIT


class TokenScope(BasePermission):
    def has_permission(self, request, view) -> bool:
        token = request.auth
        if not hasattr(token, "allows"):
            return True  # a browser session: the role alone decides (API tokens and hub credentials have scopes)
        needed = required_scope(request, view)
        if needed == ANY_SCOPE or token.allows(needed):
            return True
        raise exceptions.PermissionDenied(
            f"this API token has the scope(s) {', '.join(token.scopes) or 'none'} but {request.method} "
            f"{request.path} needs '{needed}': create a token with that scope at /settings/tokens/",
            code="insufficient_scope",
        )
