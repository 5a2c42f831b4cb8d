"""The Jupyter server's client of the Kakehashi portal API, authenticated with the server's hub token.

The portal asks the hub whose token it is, so nothing here (or in the browser) can choose who the job belongs to.
"""

from __future__ import annotations

import json
import os
from typing import Any
from urllib.parse import urlencode, urljoin, urlsplit

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest
from traitlets import Float, Unicode, default
from traitlets.config import Configurable


class PortalError(Exception):
    """A refusal to show the user: the portal's own (status, detail, code, field) or why it could not be asked."""

    def __init__(self, status: int, detail: str, code: str = "portal_error", field: str | None = None) -> None:
        super().__init__(detail)
        self.status, self.detail, self.code, self.field = status, detail, code, field

    def as_json(self) -> dict[str, Any]:
        return {"detail": self.detail, "code": self.code, "field": self.field}


class KakehashiPortal(Configurable):
    """Where the portal is (c.KakehashiPortal.url, else $KAKEHASHI_PORTAL_URL) and how to reach it."""

    url = Unicode(help="the portal's base URL as this server reaches it, e.g. http://kakehashi.example:8000").tag(config=True)
    service_name = Unicode(help="the portal's service name on the hub (links go through /services/<name>/)").tag(config=True)
    timeout = Float(60.0, help="seconds to wait for the portal").tag(config=True)

    @default("url")
    def _default_url(self) -> str:
        return os.environ.get("KAKEHASHI_PORTAL_URL", "")

    @default("service_name")
    def _default_service_name(self) -> str:
        return os.environ.get("KAKEHASHI_HUB_SERVICE_NAME", "kakehashi")

    def page_link(self, portal_url: str | None) -> str | None:
        """A portal page as a link through the hub (/services/<name>/<path>), which signs the browser in first."""
        if not portal_url:
            return None
        path = urlsplit(portal_url).path.lstrip("/")
        base = os.environ.get("JUPYTERHUB_BASE_URL", "/").rstrip("/")
        return f"{base}/services/{self.service_name}/{path}"

    def _url(self, path: str) -> str:
        """`jobs/5/` under /api/v1/, or a URL the portal gave (an output's download link) on the configured address."""
        if path.startswith(("http://", "https://")):
            parts = urlsplit(path)
            target = parts.path + (f"?{parts.query}" if parts.query else "")
        else:
            target = f"/api/v1/{path.lstrip('/')}"
        return self.url.rstrip("/") + target

    async def call(self, method: str, path: str, *, params: dict | None = None, body: Any = None,
                   headers: dict | None = None, raw: bool = False) -> Any:
        """The portal's answer (JSON, or bytes with raw); PortalError otherwise."""
        if not self.url:
            raise PortalError(503, "this server does not know where the Kakehashi portal is: set KAKEHASHI_PORTAL_URL "
                                   "(the hub's configuration does this for servers it starts)", "not_configured")
        token = os.environ.get("JUPYTERHUB_API_TOKEN", "")
        if not token:
            raise PortalError(503, "this Jupyter server was not started by JupyterHub, so it has no hub token to "
                                   "identify you to the portal", "no_hub_token")
        url = self._url(path)
        if params:
            url += ("&" if "?" in url else "?") + urlencode(params)
        request = HTTPRequest(
            url, method=method, request_timeout=self.timeout, follow_redirects=False,
            headers={"Authorization": f"token {token}", "Accept": "application/json",
                     **({"Content-Type": "application/json"} if body is not None else {}), **(headers or {})},
            body=json.dumps(body) if body is not None else None,
        )
        try:
            response = await AsyncHTTPClient().fetch(request)
        except HTTPClientError as exc:
            if raw and method == "GET" and exc.code in (301, 302, 303, 307, 308) and exc.response is not None \
                    and exc.response.headers.get("Location"):
                # A job's output kept in an object store: the portal answers with a presigned URL. Fetch it there,
                # without the hub token (the presigned URL is its own authorization, and the token is not the store's).
                return await self._download(urljoin(url, exc.response.headers["Location"]))
            raise _refusal(exc) from None
        except OSError as exc:
            raise PortalError(502, f"the Kakehashi portal at {self.url} could not be reached: {exc}", "portal_unreachable") from None
        return response.body if raw else json.loads(response.body or b"null")

    async def _download(self, url: str) -> bytes:
        """The bytes at a presigned URL the portal redirected to (no Authorization header: it is not the portal)."""
        request = HTTPRequest(url, method="GET", request_timeout=self.timeout, follow_redirects=True, max_redirects=5)
        try:
            response = await AsyncHTTPClient().fetch(request)
        except HTTPClientError as exc:
            if exc.code == 599 or exc.response is None:
                raise PortalError(502, f"the object store holding the job's outputs could not be reached: {exc.message}",
                                  "storage_unreachable") from None
            raise PortalError(502, f"the object store holding the job's outputs answered {exc.code} {exc.message}",
                              "storage_error") from None
        except OSError as exc:
            raise PortalError(502, f"the object store holding the job's outputs could not be reached: {exc}",
                              "storage_unreachable") from None
        return response.body


def _refusal(exc: HTTPClientError) -> PortalError:
    answer: dict = {}
    if exc.response is not None and exc.response.body:
        try:
            answer = json.loads(exc.response.body)
        except ValueError:
            answer = {}
    detail = answer.get("detail") if isinstance(answer, dict) else None
    if exc.code == 599 or exc.response is None:
        return PortalError(502, f"the Kakehashi portal could not be reached: {exc.message}", "portal_unreachable")
    return PortalError(exc.code, detail or f"the portal answered {exc.code} {exc.message}",
                       answer.get("code", "portal_error"), answer.get("field"))
