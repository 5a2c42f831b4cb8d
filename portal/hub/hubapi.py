"""The portal's calls to the JupyterHub API: who a token belongs to, and the hub's users.

The hub is asked, never the client: a user name sent with a request proves nothing. Answers about a token are
cached for KAKEHASHI_HUB_TOKEN_CACHE_SECONDS under the token's SHA-256 (the token itself is never stored or logged),
so a burst of API calls from Lab costs the hub one request; a token revoked on the hub stops working within that
time.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

import requests
from django.conf import settings
from django.core.cache import cache

from portal.crypto import token_digest

TIMEOUT_SECONDS = 5


class HubTokenRefused(Exception):
    """The hub does not know the token, or it is not a user's token with access to the portal."""


class HubUnavailable(Exception):
    """The hub could not be asked (down, unreachable, or an answer we cannot read)."""


@dataclass(frozen=True)
class HubUser:
    name: str
    scopes: frozenset[str]


def enabled() -> bool:
    return bool(settings.KAKEHASHI_HUB_URL)


def api_url(path: str) -> str:
    return f"{settings.KAKEHASHI_HUB_API_URL.rstrip('/')}/{path.lstrip('/')}"


def access_scope() -> str:
    return f"access:services!service={settings.KAKEHASHI_HUB_SERVICE_NAME}"


def user_for_token(token: str) -> HubUser:
    """The hub user a token belongs to, if it is a user's token that may access the portal."""
    key = f"hub-token:{token_digest(token)}"
    cached = cache.get(key)
    if cached is None:
        model = _get("user", token, refused_on=(401, 403))
        cached = {"kind": model.get("kind"), "name": model.get("name"), "scopes": model.get("scopes") or []}
        cache.set(key, cached, settings.KAKEHASHI_HUB_TOKEN_CACHE_SECONDS)
    if cached["kind"] != "user" or not cached["name"]:
        raise HubTokenRefused("this hub token is not a user's token (services cannot submit jobs)")
    scopes = frozenset(cached["scopes"])
    if not ({"access:services", access_scope()} & scopes):
        raise HubTokenRefused(f"this hub token does not carry the scope {access_scope()}: the hub's configuration "
                              "must grant it (see jupyterhub/jupyterhub_config.py)")
    return HubUser(cached["name"], scopes)


def list_users() -> list[dict]:
    """Every hub user (name, admin, last activity), with the service's own token (scope list:users)."""
    return _get("users", settings.KAKEHASHI_HUB_API_TOKEN)


def user_model(name: str) -> dict:
    """One hub user with their servers (each with its `last_activity`), with the service's own token."""
    return _get(f"users/{quote(name, safe='')}", settings.KAKEHASHI_HUB_API_TOKEN)


def service_request(method: str, path: str, *, timeout: float = TIMEOUT_SECONDS, **kwargs) -> requests.Response:
    """A request to the hub's API as the portal's own service (its token; e.g. scope `servers` to start and remove
    named servers). The caller reads the answer; requests' own exceptions pass through."""
    return requests.request(method, api_url(path), timeout=timeout,
                            headers={"Authorization": f"token {settings.KAKEHASHI_HUB_API_TOKEN}"}, **kwargs)


def _get(path: str, token: str, refused_on: tuple[int, ...] = ()):
    url = api_url(path)
    try:
        response = requests.get(url, headers={"Authorization": f"token {token}"}, timeout=TIMEOUT_SECONDS)
    except requests.RequestException as exc:
        raise HubUnavailable(f"the JupyterHub at {settings.KAKEHASHI_HUB_API_URL} could not be reached: "
                             f"{type(exc).__name__}") from None
    if response.status_code in refused_on:
        raise HubTokenRefused("the JupyterHub does not accept this token (unknown, expired or revoked)")
    if response.status_code != 200:
        raise HubUnavailable(f"the JupyterHub answered {response.status_code} to GET {url}")
    try:
        return response.json()
    except ValueError:
        raise HubUnavailable(f"the JupyterHub's answer to GET {url} is not JSON") from None
