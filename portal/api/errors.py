"""Every API error is JSON `{"detail": "...", "code": "...", "field": "..."}` with the status that fits.

Domain refusals raised by the action functions are mapped here, so views stay thin:
- SubmitError → 400 (its `field` says which input to change)
- BudgetRefused → 402 Payment Required, code `budget_exceeded`: the request is valid and allowed, but the
  project's budget cannot pay for it. 402 lets scripts tell "fix your request" (400) and "you may not" (403)
  apart from "ask for more budget or a smaller job"; the message says how much is left.
- CancelError → 409 (the job already ended), StorageError → its own status (400, 409, 413)
- a body over Django's DATA_UPLOAD_MAX_MEMORY_SIZE → 413, code `too_large`, naming the notebook limit
- PermissionDenied → 403, Http404 → 404 (objects of projects you cannot see are "not found", never "forbidden",
  so their existence does not leak).
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig
from django.http import Http404
from rest_framework import exceptions
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from portal import unavailable
from portal.jobs.actions.cancel import CancelError
from portal.jobs.actions.validation import BudgetRefused, SubmitError
from portal.storage.actions import StorageError

log = logging.getLogger(__name__)


class ApiError(exceptions.APIException):
    """An API refusal that knows its status, code and (optionally) the input field at fault."""

    def __init__(self, detail: str, *, status_code: int = 400, code: str = "invalid", field: str | None = None) -> None:
        super().__init__(detail, code)
        self.status_code, self.code, self.field = status_code, code, field


class NotFound(ApiError):
    def __init__(self, detail: str, *, field: str | None = None) -> None:
        super().__init__(detail, status_code=404, code="not_found", field=field)


def error_response(status_code: int, detail: str, code: str, field: str | None = None, **extra: Any) -> Response:
    body: dict[str, Any] = {"detail": detail, "code": code}
    if field:
        body["field"] = field
    body.update(extra)
    return Response(body, status=status_code)


_MESSAGES = {
    "not_authenticated": (
        "authentication required: send 'Authorization: Bearer <token>' (create a token at /settings/tokens/, "
        "or run: kakehashi login)"
    ),
}


def exception_handler(exc: Exception, context: dict) -> Response:
    if isinstance(exc, BudgetRefused):
        return error_response(402, exc.message, "budget_exceeded", exc.field)
    if isinstance(exc, SubmitError):
        return error_response(400, exc.message, exc.code, exc.field)
    if isinstance(exc, CancelError):
        return error_response(409, str(exc), "already_ended")
    if isinstance(exc, StorageError):
        return error_response(exc.status, exc.message, exc.code, exc.field)
    if isinstance(exc, ApiError):
        return error_response(exc.status_code, str(exc.detail), exc.code, exc.field)
    if isinstance(exc, DjangoPermissionDenied):
        return error_response(403, str(exc) or "you are not allowed to do this", "permission_denied")
    if isinstance(exc, Http404):
        return error_response(404, "not found (or not in a project you can see)", "not_found")
    if isinstance(exc, exceptions.Throttled):
        wait = int(exc.wait or 1)
        response = error_response(
            429, f"too many requests with this token; try again in {wait} s (the limit is set by the site admins)",
            "throttled",
        )
        response["Retry-After"] = str(wait)
        return response

    if isinstance(exc, RequestDataTooBig):
        # Django's own limit on a JSON body (DATA_UPLOAD_MAX_MEMORY_SIZE, the notebook limit plus 1 MiB): read
        # before any view code, so nothing was recorded; say what the limits are rather than answer 500.
        return error_response(
            413, f"the request body is larger than {_size(settings.DATA_UPLOAD_MAX_MEMORY_SIZE)}: a notebook may be at "
                 f"most {_size(settings.KAKEHASHI_MAX_NOTEBOOK_BYTES)} (clear its outputs first); put large data in "
                 "the project's storage", "too_large")
    if unavailable.database_down(exc):
        log.error("database unreachable in %s: %s", context.get("view").__class__.__name__, exc)
        response = error_response(503, unavailable.MESSAGE, "database_unavailable")
        response["Retry-After"] = str(unavailable.RETRY_AFTER_SECONDS)
        return response
    response = drf_exception_handler(exc, context)
    if response is None:
        # Not an API exception: a bug. Answer in the API's shape and keep the traceback in the log.
        log.exception("API error in %s", context.get("view").__class__.__name__ if context.get("view") else "?")
        return error_response(500, "internal error: the site admins can find the details in the server log", "server_error")
    if isinstance(exc, exceptions.ValidationError):
        field, message, code = _first_error(exc.detail, exc.get_codes())
        errors = exc.detail if isinstance(exc.detail, dict) else None
        response.data = {"detail": f"{field}: {message}" if field else message, "code": code}
        if field:
            response.data["field"] = field
        if errors:
            response.data["errors"] = errors
        return response
    codes = exc.get_codes() if isinstance(exc, exceptions.APIException) else None
    code = codes if isinstance(codes, str) else getattr(exc, "default_code", "error")
    detail = response.data.get("detail") if isinstance(response.data, dict) else None
    response.data = {"detail": _MESSAGES.get(code, str(detail) if detail is not None else str(exc)), "code": code}
    return response


def _size(n: int) -> str:
    return f"{n / 2**20:g} MiB" if n >= 2**20 else f"{n / 1024:g} KiB"


def _first_error(detail: Any, codes: Any, prefix: str = "") -> tuple[str | None, str, str]:
    """The first (field path, message, code) of a DRF validation error, however nested."""
    if isinstance(detail, dict):
        for key, value in detail.items():
            name = key if key != "non_field_errors" else ""
            path = f"{prefix}.{name}" if prefix and name else (name or prefix)
            return _first_error(value, codes.get(key) if isinstance(codes, dict) else codes, path)
    if isinstance(detail, list) and detail:
        return _first_error(detail[0], codes[0] if isinstance(codes, list) and codes else codes, prefix)
    code = codes if isinstance(codes, str) else "invalid"
    return (prefix or None), str(detail), code
