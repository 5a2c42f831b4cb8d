"""django-csp's middleware, plus the origins that depend on the site's configuration at the time of the request.

- form-action: the identity providers and the JupyterHub (its OAuth sign-in). Chromium applies form-action to the redirect that follows a form post too:
  the "Sign in with …" button posts to the portal, which redirects to the identity provider, so the provider's
  origin must be allowed or the browser stops there.
- connect-src: the object store's public address, which browsers upload parts to and read part lists from.
"""

from __future__ import annotations

from csp.middleware import CSPMiddleware as BaseCSPMiddleware
from csp.middleware import PolicyParts
from django.conf import settings


class CSPMiddleware(BaseCSPMiddleware):
    def get_policy_parts(self, request, response, report_only: bool = False) -> PolicyParts:
        parts = super().get_policy_parts(request, response, report_only)
        if report_only or not response.get("Content-Type", "").startswith("text/html"):
            # Forms and uploads live in pages: an API answer, a schema or a file needs no site-specific origins
            # (and costs no query to find them).
            return parts
        from portal.accounts.sso import origin, provider_origins

        update = dict(parts.update or {})
        hub = getattr(settings, "KAKEHASHI_HUB_URL", "")
        if origins := [*provider_origins(), *([origin(hub)] if hub else [])]:
            update["form-action"] = origins
        store = getattr(settings, "KAKEHASHI_S3_PUBLIC_URL", "") if getattr(settings, "KAKEHASHI_S3_BUCKET", "") else ""
        if store:
            update["connect-src"] = [origin(store)]
        parts.update = update or None
        return parts
