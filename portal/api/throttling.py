"""One request budget per API token (settings.KAKEHASHI_API_RATE), so one runaway script slows only itself."""

from __future__ import annotations

from django.conf import settings
from rest_framework.throttling import SimpleRateThrottle

from portal.api.models import ApiToken


class TokenRateThrottle(SimpleRateThrottle):
    scope = "token"

    def get_rate(self) -> str:
        # Read at request time (DRF reads its rates once at import), so the setting can change without a restart
        # of the test process and stays the one place the rate is configured.
        return getattr(settings, "KAKEHASHI_API_RATE", None) or super().get_rate()

    def get_cache_key(self, request, view) -> str:
        if isinstance(request.auth, ApiToken):
            ident = f"token-{request.auth.pk}"
        elif request.user and request.user.is_authenticated:
            ident = f"user-{request.user.pk}"  # a browser session (Swagger UI)
        else:
            ident = f"ip-{self.get_ident(request)}"
        return self.cache_format % {"scope": self.scope, "ident": ident}
