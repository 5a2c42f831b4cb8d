"""Where a request comes from, for the audit rows written while it is handled (portal.audit.actions.record)."""

from __future__ import annotations

from portal.audit.actions import request_origin


class RequestOrigin:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        with request_origin(request):
            return self.get_response(request)
