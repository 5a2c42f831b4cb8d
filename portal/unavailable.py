"""When the portal's database is unreachable, every page and API call answers 503 with a message, never a
traceback or a bare 500: the request was fine, the site is briefly unable to serve it, and a client should retry.

Django sends any exception no view or middleware handled to `handler500` (portal/urls.py), wherever it was
raised (a session or token lookup in a middleware included), so this is the one place that sees them all. API
views answer through portal.api.errors, which asks `database_down` the same question.
"""

from __future__ import annotations

import logging
import re
import sys

from django.db import InterfaceError, OperationalError
from django.http import HttpResponse, JsonResponse
from django.views.defaults import server_error as django_server_error

log = logging.getLogger(__name__)

RETRY_AFTER_SECONDS = 30
_STATEMENT_ERRORS = re.compile(r"syntax error|no such (table|column|function)|has no column|wrong number of arguments")
MESSAGE = ("the portal cannot reach its database right now, so nothing was read or changed; try again in a minute "
           "(the site admins see this in the server log)")
_PAGE = (
    "<!doctype html><html lang=en><head><meta charset=utf-8><title>Kakehashi is briefly unavailable</title></head>"
    "<body><h1>Kakehashi is briefly unavailable</h1><p>{message}.</p></body></html>"
)


def database_down(exc: BaseException | None) -> bool:
    """Whether `exc` (or what caused it) says the database could not be reached or dropped the connection."""
    while exc is not None:
        if isinstance(exc, (OperationalError, InterfaceError)):
            # SQLite (`make run`) reports a statement it cannot run as an OperationalError too: that is a bug in the
            # portal, not an outage, and the page must not blame the database (issue 25).
            return not _STATEMENT_ERRORS.search(str(exc))
        exc = exc.__cause__ or exc.__context__
    return False


def unavailable(request) -> HttpResponse:
    if request.path.startswith("/api/"):
        response: HttpResponse = JsonResponse({"detail": MESSAGE, "code": "database_unavailable"}, status=503)
    else:
        response = HttpResponse(_PAGE.format(message=MESSAGE[0].upper() + MESSAGE[1:]), status=503)
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


def server_error(request, *args, **kwargs) -> HttpResponse:
    exc = sys.exc_info()[1]
    if database_down(exc):
        log.error("database unreachable while serving %s %s: %s", request.method, request.path, exc)
        return unavailable(request)
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": "internal error: the site admins can find the details in the server log",
                             "code": "server_error"}, status=500)
    return django_server_error(request, *args, **kwargs)
