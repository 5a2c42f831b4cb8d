"""Direct, resumable, parallel uploads to the portal's object store (standard library only).

The same protocol as the Data page: create the upload with the file's path and size (the portal hands back our
open upload of the same path and size if there is one), ask which parts the store already holds and keep those
whose checksum is this file's, send the others in parallel (each presigned PUT is bound to the part's SHA-256,
so the store refuses corrupted bytes), complete with the whole file's SHA-256, computed meanwhile.
A part is read from disk twice (to hash it, then to send it) and never held in memory whole.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import os
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any

from kakehashi_cli.client import USER_AGENT, ApiError, Client, ConnectionFailed

READ_BYTES = 1024 * 1024
PART_ATTEMPTS = 4
# A folder's small files go many at once (uploads/batch/): one request signs up to BATCH_FILES PUTs, one completes
# them, and BATCH_THREADS PUTs travel at once (small files are latency-bound, not bandwidth-bound).
BATCH_FILES = 1000
BATCH_MAX_FILE = 64 * 1024 * 1024
BATCH_THREADS = 16


class UploadFailed(Exception):
    """The object store refused a part (after retries) or could not be reached."""


def file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(READ_BYTES), b""):
            digest.update(chunk)
    return digest.hexdigest()


def part_sha256(path: str, offset: int, size: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in _read_range(handle, offset, size):
            digest.update(chunk)
    return base64.b64encode(digest.digest()).decode()


def _read_range(handle, offset: int, size: int) -> Iterator[bytes]:
    handle.seek(offset)
    left = size
    while left > 0:
        chunk = handle.read(min(READ_BYTES, left))
        if not chunk:
            raise UploadFailed("the file became shorter while it was being uploaded")
        left -= len(chunk)
        yield chunk


class _RangeReader:
    """A file-like view of one part, for http.client to stream."""

    def __init__(self, path: str, offset: int, size: int, on_bytes: Callable[[int], None]) -> None:
        self.handle = open(path, "rb")  # noqa: SIM115 - closed by the caller
        self.handle.seek(offset)
        self.left, self.on_bytes = size, on_bytes

    def read(self, n: int = -1) -> bytes:
        if self.left <= 0:
            return b""
        chunk = self.handle.read(self.left if n is None or n < 0 else min(n, self.left))
        self.left -= len(chunk)
        self.on_bytes(len(chunk))
        return chunk

    def close(self) -> None:
        self.handle.close()


class Progress:
    """Bytes sent, speed and time left, printed on one line when stderr is a terminal."""

    def __init__(self, total: int, label: str, enabled: bool | None = None) -> None:
        self.total, self.label, self.done = total, label, 0
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self.started, self.lock, self.last_print = time.monotonic(), threading.Lock(), 0.0
        self.sent = 0  # this run's bytes (not those already in the store): the speed counts these

    def skip(self, n: int) -> None:
        with self.lock:
            self.done += n

    def add(self, n: int) -> None:
        with self.lock:
            self.done += n
            self.sent += n
            now = time.monotonic()
            if self.enabled and (now - self.last_print > 0.5 or self.done >= self.total):
                self.last_print = now
                sys.stderr.write("\r" + self.line() + "\033[K")
                sys.stderr.flush()

    def undo(self, n: int) -> None:  # a part that failed is sent again from its start
        with self.lock:
            self.done -= n
            self.sent -= n

    def line(self) -> str:
        elapsed = max(time.monotonic() - self.started, 1e-6)
        speed = self.sent / elapsed
        left = (self.total - self.done) / speed if speed > 0 else 0
        percent = 100 * self.done / self.total if self.total else 100
        return (f"{self.label}: {percent:5.1f} % of {size_text(self.total)}, {size_text(speed)}/s, "
                f"{_duration(left)} left")

    def finish(self) -> None:
        if self.enabled:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()


def size_text(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def _duration(seconds: float) -> str:
    seconds = int(seconds + 0.5)
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else (
        f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds} s")


class _Connections(threading.local):
    """One kept-alive connection to the store per thread."""

    def get(self, scheme: str, netloc: str, timeout: float) -> http.client.HTTPConnection:
        conn = getattr(self, "conn", None)
        if conn is None or getattr(self, "where", None) != (scheme, netloc):
            if conn is not None:
                conn.close()
            cls = http.client.HTTPSConnection if scheme == "https" else http.client.HTTPConnection
            conn = cls(netloc, timeout=timeout, blocksize=READ_BYTES)
            self.conn, self.where = conn, (scheme, netloc)
        return conn

    def drop(self) -> None:
        conn = getattr(self, "conn", None)
        if conn is not None:
            conn.close()
        self.conn = None


class Uploader:
    def __init__(self, client: Client, project: str, *, threads: int = 4, show_progress: bool | None = None) -> None:
        self.client, self.project, self.threads = client, project, max(1, threads)
        self.show_progress = show_progress
        self.connections = _Connections()
        self.resumed_parts = 0  # of the last file: parts found in the store already

    def upload_file(self, local: str, dest: str, *, overwrite: bool = False, sha256: str | None = None) -> dict[str, Any]:
        """Upload (or resume) one file; returns the portal's description of the stored file.

        The whole file's SHA-256 is computed while the parts travel (it is needed only to complete), so hashing
        adds no time before the first byte leaves."""
        size = os.path.getsize(local)
        _, upload = self.client.post(f"/api/v1/projects/{urllib.parse.quote(self.project)}/uploads/",
                                     {"path": dest, "size": size, "overwrite": overwrite,
                                      **({"sha256": sha256} if sha256 else {})})
        if upload["state"] == "completed":
            return upload["file"]
        with ThreadPoolExecutor(1) as hasher:
            whole = hasher.submit(file_sha256, local) if not sha256 else None
            part_size, count = upload["part_size"], upload["part_count"]
            expected = {n: part_size if n < count else size - part_size * (count - 1) for n in range(1, count + 1)}
            etags: dict[int, str] = {}
            if upload.get("resumed"):
                # Parts of an earlier run count only if they are this file's bytes.
                listed = self.client.request("GET", upload["parts_url"])[1]["parts"]
                etags = {p["number"]: p["etag"] for p in listed if expected.get(p["number"]) == p["size"]
                         and p.get("sha256") == part_sha256(local, (p["number"] - 1) * part_size, p["size"])}
            held = set(etags)
            self.resumed_parts = len(held)
            progress = Progress(size, dest, self.show_progress)
            progress.skip(sum(expected[n] for n in held))
            todo = [n for n in range(1, count + 1) if n not in held]
            try:
                with ThreadPoolExecutor(self.threads) as pool:
                    futures = [pool.submit(self._send_part, upload, local, n, part_size, expected[n], progress)
                               for n in todo]
                    for future in as_completed(futures):
                        number, etag = future.result()
                        etags[number] = etag
            finally:
                progress.finish()
            digest = sha256 or whole.result()
        parts = [{"number": n, "etag": etag} for n, etag in sorted(etags.items()) if etag]
        return self.client.request("POST", upload["complete_url"], json_body={"sha256": digest, "parts": parts})[1]

    def _send_part(self, upload: dict, local: str, number: int, part_size: int, size: int,
                   progress: Progress) -> tuple[int, str]:
        """Send one part; returns (its number, the ETag the store answered with)."""
        offset = (number - 1) * part_size
        checksum = part_sha256(local, offset, size)
        for attempt in range(1, PART_ATTEMPTS + 1):
            # Signed per attempt: a URL may have expired while the part waited or was retried.
            _, signed = self.client.request("POST", upload["parts_url"],
                                            json_body={"parts": [{"number": number, "sha256": checksum}]})
            part = signed["parts"][0]
            reader = _RangeReader(local, offset, size, progress.add)
            etag = ""
            try:
                status, body, etag = self._put(part["url"], part["headers"], reader, size)
            except (OSError, http.client.HTTPException) as exc:
                status, body = 0, str(exc)
                self.connections.drop()
            finally:
                reader.close()
            if 200 <= status < 300:
                return number, etag
            progress.undo(size - reader.left)
            if status and 400 <= status < 500 and status not in (403, 408, 429):
                raise UploadFailed(f"the object store refused part {number} ({status}): {body[:300]}")
            if attempt == PART_ATTEMPTS:
                raise UploadFailed(f"part {number} could not be sent after {attempt} attempts ({status or body})")
            time.sleep(min(2 ** attempt, 10))

    def _put(self, url: str, headers: dict, body: _RangeReader, size: int) -> tuple[int, str, str]:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https"):
            raise ConnectionFailed(f"the portal gave a part URL that is not http(s): {url[:80]}")
        conn = self.connections.get(parts.scheme, parts.netloc, self.client.timeout)
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        conn.request("PUT", target, body=body, headers={**headers, "Content-Length": str(size),
                                                         "User-Agent": USER_AGENT})
        response = conn.getresponse()
        text = response.read().decode("utf-8", "replace")
        if response.getheader("Connection", "").lower() == "close":
            self.connections.drop()
        return response.status, text, response.getheader("ETag", "")


class BatchUnsupported(Exception):
    """The portal has no batch uploads (an older one): send the files one by one."""


class BatchUploader:
    """A folder's small files: hashed here, signed by the thousand, PUT straight to the store, completed by the
    thousand. A file the project already holds (same path, size and SHA-256) is not sent again, so running the
    same command after an interruption sends only what is missing."""

    def __init__(self, uploader: Uploader, *, threads: int = BATCH_THREADS) -> None:
        self.uploader, self.client, self.threads = uploader, uploader.client, max(1, threads)
        self.present = 0  # files found in the project already

    def upload(self, files: list[tuple[str, str]], *, overwrite: bool = False) -> list[dict[str, Any]]:
        base = f"/api/v1/projects/{urllib.parse.quote(self.uploader.project)}/uploads/batch/"
        sizes = [os.path.getsize(local) for local, _ in files]
        with ThreadPoolExecutor(self.threads) as pool:
            digests = list(pool.map(file_sha256, [local for local, _ in files]))
        progress = Progress(sum(sizes), f"{len(files)} files", self.uploader.show_progress)
        results: list[dict[str, Any]] = []
        try:
            for start in range(0, len(files), BATCH_FILES):
                chunk = list(range(start, min(start + BATCH_FILES, len(files))))
                results += self._batch(base, [(files[i][0], files[i][1], sizes[i], digests[i]) for i in chunk],
                                       overwrite, progress)
        finally:
            progress.finish()
        return results

    def _create(self, base: str, items, overwrite: bool) -> list[dict]:
        try:
            _, created = self.client.post(base, {"overwrite": overwrite, "files": [
                {"path": dest, "size": size, "sha256": sha} for _, dest, size, sha in items]})
        except ApiError as exc:
            if exc.status in (404, 405) and exc.code != "no_object_store" and "project" not in exc.detail:
                raise BatchUnsupported() from None
            raise
        return created["uploads"]

    def _batch(self, base: str, items, overwrite: bool, progress: Progress) -> list[dict[str, Any]]:
        local_of = {dest: (local, size, sha) for local, dest, size, sha in items}
        stored: list[dict[str, Any]] = []
        todo = items
        for attempt in range(1, PART_ATTEMPTS + 1):
            uploads = self._create(base, todo, overwrite)
            for upload in uploads:
                if upload["state"] == "present":
                    local, size, sha = local_of[upload["path"]]
                    progress.skip(size)
                    self.present += 1
                    stored.append({"path": upload["path"], "size": size, "sha256": sha, "state": "present",
                                   "project": self.uploader.project})
            sending = [u for u in uploads if u["state"] == "upload"]
            if not sending:
                return stored
            with ThreadPoolExecutor(self.threads) as pool:
                sent = list(pool.map(lambda u: self._send(u, local_of[u["path"]][0], progress), sending))
            if not any(sent):
                raise UploadFailed(f"the object store refused every file of the batch (e.g. {sending[0]['path']})")
            _, done = self.client.post(base + "complete/", {"ids": [u["id"] for u in sending]})
            stored += done["files"]
            missing = set(done["missing"])
            if not missing:
                return stored
            # Sent again with fresh URLs: a PUT that failed, or a URL that expired while it waited.
            todo = [(local_of[u["path"]][0], u["path"], *local_of[u["path"]][1:]) for u in sending if u["id"] in missing]
            time.sleep(min(2 ** attempt, 10))
        raise UploadFailed(f"{len(todo)} file(s) could not be sent after {PART_ATTEMPTS} attempts "
                           f"(e.g. {todo[0][1]})")

    def _send(self, upload: dict, local: str, progress: Progress) -> bool:
        size = upload["size"]
        reader = _RangeReader(local, 0, size, progress.add)
        try:
            status, body, _ = self.uploader._put(upload["url"], upload["headers"], reader, size)
        except (OSError, http.client.HTTPException):
            self.uploader.connections.drop()
            progress.undo(size - reader.left)
            return False
        finally:
            reader.close()
        if 200 <= status < 300:
            return True
        progress.undo(size - reader.left)
        if status == 400 and "BadDigest" in body:
            raise UploadFailed(f"{upload['path']} changed while it was being uploaded (its bytes no longer match the "
                               "SHA-256 computed before); run the command again")
        return False


def files_to_upload(local: str, dest: str | None) -> list[tuple[str, str]]:
    """(local file, path in the project) for a file or, recursively, a folder (sorted, so runs are repeatable).

    A file goes to `dest` (default: its name; ending in '/' = into that folder); a folder's files go under
    `dest` (default: the folder's own name) keeping their relative paths."""
    if os.path.isdir(local):
        base = (dest if dest is not None else os.path.basename(os.path.abspath(local))).rstrip("/")
        found = []
        for root, dirs, names in os.walk(local):
            dirs.sort()
            for name in sorted(names):
                path = os.path.join(root, name)
                if os.path.isfile(path) and not os.path.islink(path):
                    rel = os.path.relpath(path, local).replace(os.sep, "/")
                    found.append((path, f"{base}/{rel}" if base else rel))
        return found
    name = os.path.basename(local)
    if dest is None or dest == "":
        return [(local, name)]
    return [(local, dest + name if dest.endswith("/") else dest)]
