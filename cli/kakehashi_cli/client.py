"""A small HTTP client of the Kakehashi API on urllib (no third-party packages)."""

from __future__ import annotations

import json
import os
import ssl
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

from kakehashi_cli import __version__

USER_AGENT = f"kakehashi-cli/{__version__}"


class ApiError(Exception):
    """The portal answered with an error. `detail` is its message for a person."""

    def __init__(self, status: int, detail: str, code: str = "", field: str | None = None) -> None:
        super().__init__(detail)
        self.status, self.detail, self.code, self.field = status, detail, code, field


class BadAddress(ValueError):
    """The portal's address is not an http:// or https:// URL."""


class ConnectionFailed(Exception):
    """The portal could not be reached (or stopped answering)."""


class Client:
    def __init__(self, url: str, token: str | None, timeout: float = 60.0) -> None:
        _check_scheme(url)
        self.base = url.rstrip("/")
        self.token = token
        self.timeout = timeout

    # ------------------------------------------------------------------------------------------ plumbing

    def url_for(self, path: str, params: dict[str, Any] | None = None) -> str:
        if path.startswith(("http://", "https://")):
            url = path  # a `next` link the portal gave us
        else:
            url = self.base + path
        clean = {k: v for k, v in (params or {}).items() if v is not None and v != ""}
        if clean:
            url += ("&" if "?" in url else "?") + urllib.parse.urlencode(clean)
        return url

    def request(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        json_body: Any = None,
        data: Any = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, Any]:
        all_headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
        if self.token:
            all_headers["Authorization"] = f"Bearer {self.token}"
        if json_body is not None:
            data = json.dumps(json_body).encode("utf-8")
            all_headers["Content-Type"] = "application/json"
        all_headers.update(headers or {})
        url = self.url_for(path, params)
        _check_scheme(url)
        req = urllib.request.Request(url, data=data, headers=all_headers, method=method)  # noqa: S310
        try:
            # The scheme is checked (http or https only: never file: or others) in __init__ and _check_scheme.
            with urllib.request.urlopen(req, timeout=self.timeout) as response:  # noqa: S310
                body = response.read()
                return response.status, _decode(body)
        except urllib.error.HTTPError as exc:
            raise _api_error(exc) from None
        except (TimeoutError, urllib.error.URLError, ConnectionError, ssl.SSLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ConnectionFailed(f"cannot reach {self.base}: {reason}") from None

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params=params)[1]

    def post(self, path: str, body: Any = None, headers: dict[str, str] | None = None) -> tuple[int, Any]:
        return self.request("POST", path, json_body=body if body is not None else {}, headers=headers)

    def paginate(self, path: str, **params: Any) -> Iterator[dict[str, Any]]:
        """Every item of a paginated list, following `next` links."""
        page = self.get(path, **params)
        while True:
            if isinstance(page, list):
                yield from page
                return
            yield from page.get("results", [])
            if not page.get("next"):
                return
            page = self.request("GET", page["next"])[1]

    def download(self, path: str, destination: str) -> int:
        """Save what `path` serves to `destination` (written to a temporary name, renamed when whole); returns
        the bytes written. A redirect to the object store (a presigned GET) is followed without our token: the
        signature in the URL is the store's authorisation, and a second one would be refused."""
        url = self.url_for(path)
        _check_scheme(url)
        headers = {"User-Agent": USER_AGENT, "Accept": "application/octet-stream, application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        opener = urllib.request.build_opener(_NoRedirect)
        req = urllib.request.Request(url, headers=headers)  # noqa: S310
        try:
            try:
                response = opener.open(req, timeout=self.timeout)
            except urllib.error.HTTPError as exc:
                if exc.code not in (301, 302, 303, 307, 308):
                    raise
                location = exc.headers.get("Location", "")
                _check_scheme(location)
                signed = urllib.request.Request(location, headers={"User-Agent": USER_AGENT})  # noqa: S310 - checked
                response = urllib.request.urlopen(signed, timeout=self.timeout)  # noqa: S310 - http(s) only, checked
            partial = destination + ".part"
            written = 0
            with response, open(partial, "wb") as out:
                while chunk := response.read(1024 * 1024):
                    out.write(chunk)
                    written += len(chunk)
            os.replace(partial, destination)
            return written
        except urllib.error.HTTPError as exc:
            raise _api_error(exc) from None
        except (TimeoutError, urllib.error.URLError, ConnectionError, ssl.SSLError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ConnectionFailed(f"cannot download from {self.base}: {reason}") from None

    def upload(self, path: str, file_path: str, fields: dict[str, str]) -> tuple[int, Any]:
        """POST a file as multipart/form-data, streamed from disk (large files never sit in memory)."""
        boundary = "kakehashi-" + uuid.uuid4().hex
        head = b"".join(
            _part_header(boundary, name) + value.encode("utf-8") + b"\r\n" for name, value in fields.items()
        )
        filename = os.path.basename(file_path)
        head += _part_header(boundary, "file", filename) + b"Content-Type: application/octet-stream\r\n\r\n"
        tail = f"\r\n--{boundary}--\r\n".encode()
        size = os.path.getsize(file_path)

        def body() -> Iterator[bytes]:
            yield head
            with open(file_path, "rb") as handle:
                while True:
                    chunk = handle.read(1024 * 1024)
                    if not chunk:
                        break
                    yield chunk
            yield tail

        headers = {
            "Content-Type": f"multipart/form-data; boundary={boundary}",
            "Content-Length": str(len(head) + size + len(tail)),
        }
        return self.request("POST", path, data=body(), headers=headers)


def _check_scheme(url: str) -> None:
    if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        raise BadAddress(f"{url!r} is not an http:// or https:// address")


def _part_header(boundary: str, name: str, filename: str | None = None) -> bytes:
    """The start of one multipart part; a plain field's value follows it, a file's Content-Type line does."""
    disposition = f'form-data; name="{name}"'
    if filename is not None:
        # The server takes the destination from the `path` field; the file name only needs to be harmless.
        safe = "".join(ch if 32 <= ord(ch) < 127 and ch not in '"\\' else "_" for ch in filename)
        disposition += f'; filename="{safe}"'
    header = f"--{boundary}\r\nContent-Disposition: {disposition}\r\n".encode()
    return header if filename is not None else header + b"\r\n"


def _decode(body: bytes) -> Any:
    if not body:
        return None
    try:
        return json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return body


def _api_error(exc: urllib.error.HTTPError) -> ApiError:
    try:
        raw = exc.read()
    except OSError:
        raw = b""
    try:
        data = json.loads(raw.decode("utf-8")) if raw else {}
    except (UnicodeDecodeError, ValueError):
        data = {}
    if isinstance(data, dict) and data.get("detail"):
        return ApiError(exc.code, str(data["detail"]), str(data.get("code") or ""), data.get("field"))
    return ApiError(exc.code, f"HTTP {exc.code} {exc.reason} from {exc.url}", "http_error")


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Hand redirects back to the caller (who follows them without the Authorization header)."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: ANN001 - urllib's signature
        return None
