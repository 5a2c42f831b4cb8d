"""Project shared storage: checked paths, uploads through the portal (file-system storage), downloads; and the
copies of files jobs left in their outputs/.

Only portal/storage touches `default_storage` (through the plain Storage API: save, open, delete) and the object
store (portal/storage/objectstore.py). With an object store configured, files arrive by direct multipart
uploads (portal/storage/uploads.py) and leave by presigned GETs; `store_file` is the simple path of `make run`.
"""

from __future__ import annotations

import hashlib
import io
import logging
import re
import unicodedata
from collections.abc import Iterator
from typing import IO

from django.conf import settings
from django.core.files.base import ContentFile, File
from django.core.files.storage import default_storage
from django.db import IntegrityError, transaction

from portal.audit.actions import record
from portal.projects import access
from portal.projects.models import Project
from portal.storage import objectstore, quota
from portal.storage.errors import (  # noqa: F401 - the refusals callers catch, re-exported
    FileExists,
    FileMissing,
    FileTooLarge,
    QuotaExceeded,
    StorageError,
    StoreUnavailable,
    UploadConflict,
)
from portal.storage.models import FileState, StoredFile

log = logging.getLogger(__name__)

MAX_PATH_CHARS = 512
MAX_PART_BYTES = 255  # a file name on every common file system and an S3 key segment
MAX_DEPTH = 32
# Letters and digits of any script, space and a few punctuation marks. These paths will reach cluster file
# systems and job scripts when files are staged for jobs: leaving out shell metacharacters ($ ` ; & | < > * ?
# ! quotes) and backslashes means no later step can be tricked by a name, and every name is also a valid S3 key.
_PART_RE = re.compile(r"^[\w .,+=@()\[\]{}~%#-]+$")


def max_upload_bytes() -> int:
    return int(settings.KAKEHASHI_MAX_UPLOAD_BYTES)


def clean_path(raw: str | None, filename: str | None = None) -> str:
    """The project-relative path a file is stored at, or StorageError saying what is wrong with it.

    An empty path means the uploaded file's own name; a path ending in "/" means "into this folder".
    """
    path = raw or ""
    if path == "" or path.endswith("/"):
        path = path + (filename or "")
    if not path:
        raise StorageError("give the file a path (e.g. data/train.csv)", field="path")
    if any(ch in path for ch in ("\0", "\n", "\r")):
        raise StorageError("the path may not contain NUL or line breaks", field="path")
    if "\\" in path:
        raise StorageError("use '/' between folders, not '\\'", field="path")
    if path.startswith("/") or re.match(r"^[A-Za-z]:", path):
        raise StorageError(f"{path!r} is absolute: give a path inside the project (e.g. data/train.csv)", field="path")
    path = unicodedata.normalize("NFC", path)  # one spelling per name: macOS sends decomposed accents
    if len(path) > MAX_PATH_CHARS:
        raise StorageError(f"the path is longer than {MAX_PATH_CHARS} characters", field="path")
    parts = path.split("/")
    if len(parts) > MAX_DEPTH:
        raise StorageError(f"the path is more than {MAX_DEPTH} folders deep", field="path")
    for part in parts:
        if part in {"", ".", ".."}:
            raise StorageError(
                f"{path!r} has an empty, '.' or '..' part: give a plain path inside the project (e.g. data/train.csv)",
                field="path",
            )
        if len(part.encode()) > MAX_PART_BYTES:
            raise StorageError(f"{part[:40]!r}… is longer than {MAX_PART_BYTES} bytes", field="path")
        if part != part.strip():
            raise StorageError(f"{part!r} starts or ends with a space", field="path")
        if part.startswith("-"):
            raise StorageError(f"{part!r} starts with '-', which commands would take for an option", field="path")
        if not _PART_RE.match(part):
            bad = sorted({ch for ch in part if not _PART_RE.match(ch)})
            raise StorageError(
                f"{part!r} contains {' '.join(repr(ch) for ch in bad)}: use letters, digits, spaces and . , _ - + = @ ( ) [ ] {{ }} ~ % #",
                field="path",
            )
    return path


def check_declared_size(content_length: str | int | None) -> None:
    """Refuse an upload from its Content-Length before its body is read (and spooled to disk)."""
    try:
        length = int(content_length or 0)
    except (TypeError, ValueError):
        return
    # Allow room for the multipart envelope and the other form fields.
    if length > max_upload_bytes() + 64 * 1024:
        raise FileTooLarge(_too_large_message(), field="file")


def _too_large_message() -> str:
    shown = quota.size_text(max_upload_bytes(), exact=True)
    return f"the file is larger than the upload limit of {shown}; ask the site admins for another way to bring it in"


MAX_KEY_BYTES = 1024  # S3's limit on a key


def storage_key(project: Project, path: str) -> str:
    key = f"projects/{project.slug}/{path}"
    if len(key.encode()) > MAX_KEY_BYTES:
        raise StorageError(f"the path is too long for the object store (its key may have at most {MAX_KEY_BYTES} "
                           "bytes in UTF-8): shorten the folder or file names", field="path")
    return key


def _digest(upload: IO[bytes]) -> tuple[int, str]:
    sha, size = hashlib.sha256(), 0
    chunks = upload.chunks() if hasattr(upload, "chunks") else iter(lambda: upload.read(1024 * 1024), b"")
    for chunk in chunks:
        sha.update(chunk)
        size += len(chunk)
    upload.seek(0)
    return size, sha.hexdigest()


def check_no_file_folder_clash(project: Project, clean: str) -> None:
    """A path is a file or a folder, never both: "a" and "a/b" cannot both be files of one project. Every file
    system the files reach (the portal's own disk, a download, a cluster) would refuse one of them."""
    parents = ["/".join(clean.split("/")[:n]) for n in range(1, clean.count("/") + 1)]
    clash = StoredFile.objects.filter(project=project, path__in=parents).values_list("path", flat=True).first()
    if clash is not None:
        raise UploadConflict(f"{clash} is a file, so it cannot also be a folder holding {clean}", code="path_is_a_file",
                             field="path")
    if StoredFile.objects.filter(project=project, path__startswith=clean + "/").exists():
        raise UploadConflict(f"{clean} is a folder of files, so it cannot also be a file", code="path_is_a_folder",
                             field="path")


def store_file(user, project: Project, upload, *, path: str | None = None, overwrite: bool = False) -> tuple[StoredFile, bool]:
    """Put an uploaded file into the project's storage. Returns (the file, whether it is new).

    Members who may submit jobs may upload; viewers may only read. An existing path is replaced only when
    `overwrite` is set, so a mistyped destination never destroys data silently.
    """
    access.require(user, project, "submit")
    if objectstore.configured():
        raise UploadConflict(
            "this portal's files live in an object store: upload straight to it with POST "
            f"/api/v1/projects/{project.slug}/uploads/ (kakehashi upload does), not through the portal",
            code="use_direct_upload",
        )
    if upload is None:
        raise StorageError("attach the file in the multipart field 'file'", field="file")
    clean = clean_path(path, getattr(upload, "name", None))
    check_no_file_folder_clash(project, clean)
    if getattr(upload, "size", 0) > max_upload_bytes():
        raise FileTooLarge(_too_large_message(), field="file")
    size, sha256 = _digest(upload)
    if size > max_upload_bytes():
        raise FileTooLarge(_too_large_message(), field="file")
    existing = StoredFile.objects.filter(project=project, path=clean).first()
    if existing is not None and not overwrite:
        raise FileExists(f"{clean} already exists in project {project.slug}; upload with overwrite to replace it", field="path")
    quota.check(project, size, freed=existing.size if existing is not None else 0)

    # Bytes first, under a key the storage picks (never clobbering the current file), then the row in one
    # transaction; the replaced bytes are deleted only after that commits.
    saved_name = default_storage.save(storage_key(project, clean), upload)
    try:
        with transaction.atomic():
            current = StoredFile.objects.select_for_update().filter(project=project, path=clean).first()
            if current is not None and not overwrite:
                raise FileExists(f"{clean} already exists in project {project.slug}", field="path")
            old_name = current.storage_name if current is not None else None
            if current is None:
                stored = StoredFile.objects.create(project=project, path=clean, storage_name=saved_name, size=size,
                                                   sha256=sha256, uploaded_by=user)
            else:
                current.storage_name, current.size, current.sha256, current.uploaded_by = saved_name, size, sha256, user
                current.save()
                stored = current
            record("file.upload", actor=user, project=project, target=stored, path=clean, size=size, sha256=sha256,
                   replaced=old_name is not None)
            if old_name and old_name != saved_name:
                transaction.on_commit(lambda: _delete_quietly(old_name))
    except IntegrityError:
        # Another upload of the same new path won the race.
        _delete_quietly(saved_name)
        raise FileExists(f"{clean} was just uploaded by someone else; upload with overwrite to replace it", field="path") from None
    except BaseException:
        _delete_quietly(saved_name)
        raise
    return stored, current is None


def download_url(user, stored: StoredFile) -> str | None:
    """A short-lived presigned GET of the object store for a stored file (Range requests work), or None when
    files live on the portal's own disk and the caller streams them with open_file. A file still being verified
    cannot be downloaded (its bytes may not be the file)."""
    access.require(user, stored.project, "view")
    if stored.state == FileState.VERIFYING:
        raise UploadConflict(f"{stored.path} is being verified (its whole-file SHA-256 is checked after upload): "
                             "download it once it is ready", code="verifying")
    if not objectstore.configured():
        return None
    return objectstore.presigned_download(stored.storage_name, stored.filename, settings.KAKEHASHI_DOWNLOAD_URL_SECONDS)


def open_file(user, stored: StoredFile) -> File:
    """The bytes of a stored file, for someone who can see its project (callers look it up visibly first)."""
    access.require(user, stored.project, "view")
    try:
        return default_storage.open(stored.storage_name, "rb")
    except FileNotFoundError:
        log.error("stored file %s (%s) is missing from storage", stored.pk, stored.storage_name)
        raise FileMissing(f"the contents of {stored.path} are missing from storage; ask the site admins") from None


def save_job_output(job_uuid, path: str, data: bytes) -> str:
    """Keep a file a job left in its outputs/ (a checked relative path); the name to open it by later."""
    return default_storage.save(f"jobs/{job_uuid}/outputs/{path}", ContentFile(data))


class _ChunkStream(io.RawIOBase):
    """A read-only stream over an iterator of byte chunks (what a backend streams a cluster file as)."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks, self._rest = chunks, b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while not self._rest:
            try:
                self._rest = next(self._chunks)
            except StopIteration:
                return 0
        n = min(len(buffer), len(self._rest))
        buffer[:n] = self._rest[:n]
        self._rest = self._rest[n:]
        return n


def stream_job_output(job_uuid, path: str, chunks: Iterator[bytes], size: int) -> str:
    """Stream a file a job left in its outputs/ (a checked relative path) into the object store, whatever its size,
    holding a few parts in memory at a time; the key to sign its downloads with. Object store only."""
    key = f"jobs/{job_uuid}/outputs/{path}"
    objectstore.upload_stream(key, io.BufferedReader(_ChunkStream(chunks), 1 << 20), size)
    return key


def job_output_url(stored_name: str, filename: str) -> str | None:
    """A presigned GET of a job's kept output (callers check that the job is visible first); None when outputs
    live on the portal's disk and are streamed by it."""
    if not objectstore.configured():
        return None
    return objectstore.presigned_download(stored_name, filename, settings.KAKEHASHI_DOWNLOAD_URL_SECONDS)


def open_job_output(stored_name: str) -> File:
    """The bytes of a job's kept output file (callers check that the job is visible first)."""
    return default_storage.open(stored_name, "rb")


def _delete_quietly(name: str) -> None:
    try:
        default_storage.delete(name)
    except Exception:  # noqa: BLE001 - an orphaned blob is harmless; losing the request over it is not
        log.warning("could not delete %s from storage", name, exc_info=True)
