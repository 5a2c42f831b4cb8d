"""One request budget per API token (settings.KAKEHASHI_API_RATE), so one runaway script slows only itself.

The budget is counted in a window that opens with the caller's first request and lasts the rate's period: one
counter in the cache that expires with its window. In Redis (production, the tests) a request costs one round trip:
a small Lua script increments the counter and starts its expiry when it opens the window, atomically. DRF's own
SimpleRateThrottle kept the time of every request of the period in a list it read and wrote back whole, two round
trips and a pickling per request: a twentieth of a submit request's CPU (issue 28, goal 4a). Without Redis
(`make run`'s one web process) the local cache counts the same way.
"""

from __future__ import annotations

import threading
import time

import redis
from django.conf import settings
from django.core.cache import cache
from rest_framework.throttling import SimpleRateThrottle

from portal.api.models import ApiToken

# KEYS[1]: the counter; ARGV[1]: the period in seconds. Answers {count, seconds until the window closes}. A counter
# without an expiry (none should exist) is given one, so no caller is ever refused for good.
_COUNT = """
local count = redis.call('INCR', KEYS[1])
local ttl = redis.call('TTL', KEYS[1])
if ttl < 0 then
  redis.call('EXPIRE', KEYS[1], ARGV[1])
  ttl = tonumber(ARGV[1])
end
return {count, ttl}
"""


class TokenRateThrottle(SimpleRateThrottle):
    """DRF's rate and key, counted per window (`_count`) instead of DRF's list of request times."""

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

    def allow_request(self, request, view) -> bool:
        # A key of its own: DRF's list of request times, still in the cache after an upgrade, is no counter.
        count, self._wait = _count(f"{self.get_cache_key(request, view)}:window", self.duration)
        return count <= self.num_requests

    def wait(self) -> float:
        return self._wait


_scripts: dict[str, redis.commands.core.Script] = {}
_scripts_lock = threading.Lock()


def _count(name: str, period: int) -> tuple[int, float]:
    """Count one request against `name`'s window: (requests so far in the window, seconds until it closes)."""
    location = _redis_location()
    if location is None:
        return _count_in_cache(name, period)
    script = _scripts.get(location)
    if script is None:
        with _scripts_lock:
            script = _scripts.setdefault(location, redis.Redis.from_url(location).register_script(_COUNT))
    count, ttl = script(keys=[cache.make_key(name)], args=[period])
    return int(count), float(max(int(ttl), 1))


def _redis_location() -> str | None:
    default = settings.CACHES["default"]
    if default["BACKEND"] != "django.core.cache.backends.redis.RedisCache":
        return None
    location = default["LOCATION"]
    return location[0] if isinstance(location, list | tuple) else location


def _count_in_cache(name: str, period: int) -> tuple[int, float]:
    """The same window in a cache without scripts (the local memory of `make run`'s one web process)."""
    now = time.time()
    try:
        count = cache.incr(name)
    except ValueError:  # no window open: this request opens one
        if cache.add(name, 1, timeout=period):
            cache.set(f"{name}:closes", now + period, timeout=period)
            return 1, float(period)
        count = cache.incr(name)
    return count, max(float(cache.get(f"{name}:closes", now + period)) - now, 1.0)
