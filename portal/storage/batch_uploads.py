"""Many small files uploaded at once: one request signs up to MAX_BATCH single PUTs, one request completes them
(docs/decisions/0043). A dataset folder of 10,000 files is then 10 + 10 requests to the portal and 10,000 PUTs
straight to the store, not 30,000 requests to the portal.

The same guarantees as a one-part multipart upload (portal/storage/uploads.py), kept the same way:
- each file's path, the role, the project's quota and the file/folder rule are checked when the batch is created,
  for the whole batch at once and all or nothing, and each file gets an UploadSession (its own row, resumable);
- each PUT URL is presigned with the file's SHA-256 as a signed `x-amz-checksum-sha256` header: the store
  refuses bytes that do not match (400 BadDigest) and a PUT without it or with another value (403), so an object
  at the upload's key is exactly the bytes whose checksum the uploader declared;
- completing lists the objects (one LIST per 1,000 keys, not a HEAD each) and records a StoredFile only for an
  upload whose object is there with its size, written after the upload was created (an older object at that
  key, from an upload never completed, is not taken for this one's); the quota is checked again; a file it
  replaces keeps its bytes until the switch, then they are deleted.

A file already in the project at that path with the same size and SHA-256 is `present`: nothing to send, so a
folder upload run again after an interruption sends only what is missing.
"""

from __future__ import annotations

import base64
import uuid
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from portal.audit.actions import record
from portal.enqueue import PACK_FILES, enqueue_on_commit
from portal.projects import access
from portal.projects.models import Project
from portal.storage import objectstore, quota
from portal.storage.actions import clean_path, storage_key
from portal.storage.errors import FileExists, StorageError, UploadConflict
from portal.storage.models import FileState, StoredFile, UploadSession, UploadState
from portal.storage.uploads import _clean_sha256, _clean_size, _require_store, delete_object_quietly, store_call

MAX_BATCH = 1000
# Files up to this size go in batches (one PUT each); larger ones are multipart uploads of their own.
MAX_BATCH_FILE = 64 * 1024 * 1024
# How much earlier than the upload's creation the store's clock may say an object of it was written.
CLOCK_SKEW = timedelta(seconds=5)


class UploadNotFound(StorageError):
    """An id that is not an open upload of the caller's in this project: as a single upload's, 404 to anyone else."""

    status = 404
    code = "not_found"


def _clean_files(files) -> list[tuple[str, int, str]]:
    if not isinstance(files, list) or not 1 <= len(files) <= MAX_BATCH:
        raise StorageError(f"give between 1 and {MAX_BATCH} files", field="files")
    cleaned, seen = [], set()
    for item in files:
        if not isinstance(item, dict):
            raise StorageError("each file is {path, size, sha256}", field="files")
        try:
            path = clean_path(item.get("path"))
            size = _clean_size(item.get("size"))
            sha256 = _clean_sha256(item.get("sha256"))
        except StorageError as exc:
            raise StorageError(f"{str(item.get('path'))[:200]!r}: {exc.message}", field="files") from None
        if size > MAX_BATCH_FILE:
            raise StorageError(f"{path}: files over {quota.size_text(MAX_BATCH_FILE)} are uploaded one by one "
                               "(POST uploads/), in parts", field="files")
        if path in seen:
            raise StorageError(f"{path} is in the batch twice", field="files")
        seen.add(path)
        cleaned.append((path, size, sha256))
    folders = {"/".join(p.split("/")[:n]) for p, _, _ in cleaned for n in range(1, p.count("/") + 1)}
    clash = sorted(seen & folders)
    if clash:
        raise StorageError(f"{clash[0]} is both a file and a folder in the batch", field="files")
    return cleaned


def _b64(sha256: str) -> str:
    return base64.b64encode(bytes.fromhex(sha256)).decode()


def create_batch(user, project: Project, files, *, overwrite: bool = False) -> list[dict]:
    """Start (or resume) the upload of each file; returns, in order, {path, state: "upload"|"present", id, url,
    headers} ("present": the project holds that file already, nothing to send). All or none: a refusal names
    the first file it concerns and records nothing."""
    access.require(user, project, "submit")
    _require_store()
    cleaned = _clean_files(files)
    for path, _, _ in cleaned:
        storage_key(project, path)  # refuses a path too long for a key
    paths = [p for p, _, _ in cleaned]
    parents = {"/".join(p.split("/")[:n]) for p in paths for n in range(1, p.count("/") + 1)}
    with transaction.atomic():
        # One project's creations and completions take turns: the quota cannot be overrun by racing uploads.
        Project.objects.select_for_update().filter(pk=project.pk).first()
        clash = StoredFile.objects.filter(project=project, path__in=parents).values_list("path", flat=True).first()
        if clash is not None:
            raise UploadConflict(f"{clash} is a file, so it cannot also be a folder in this batch",
                                 code="path_is_a_file", field="files")
        existing = {f.path: f for f in StoredFile.objects.filter(project=project, path__in=paths)}
        open_uploads = {}
        for session in UploadSession.objects.filter(project=project, path__in=paths, state=UploadState.OPEN,
                                                    created_by=user, upload_id="").order_by("created_at"):
            open_uploads[(session.path, session.size, session.sha256)] = session
        taken = {f.storage_name for f in existing.values()} | set(UploadSession.objects.filter(
            project=project, path__in=paths, state=UploadState.OPEN).values_list("key", flat=True))
        answers, new, needed, freed = [], [], 0, 0
        for path, size, sha256 in cleaned:
            stored = existing.get(path)
            if stored is not None and stored.size == size and stored.sha256 == sha256:
                answers.append({"path": path, "state": "present", "file": stored})
                continue
            if stored is not None and not overwrite:
                raise FileExists(f"{path} already exists in project {project.slug} with other content; upload with "
                                 "overwrite to replace it", field="files")
            if stored is not None and stored.state == FileState.VERIFYING:
                raise UploadConflict(f"{path} is being verified; replace it once the Data page shows it ready",
                                     code="verifying", field="files")
            session = open_uploads.get((path, size, sha256))
            if session is None:
                key = storage_key(project, path)
                n = 0
                while key in taken:
                    n += 1
                    key = storage_key(project, f"{path}.~{timezone.now():%Y%m%d%H%M%S}-{n}")
                taken.add(key)
                session = UploadSession(project=project, path=path, key=key, size=size, sha256=sha256,
                                        part_size=max(size, 1), overwrite=overwrite, created_by=user)
                new.append(session)
                needed += size
                freed += stored.size if stored is not None else 0
            answers.append({"path": path, "state": "upload", "session": session})
        quota.check(project, needed, freed=freed)
        UploadSession.objects.bulk_create(new)
        if new or any(a["state"] == "upload" for a in answers):
            # Signed URLs let their holder write into the project's store: who was given them, and for which files.
            record("upload.batch_start", actor=user, project=project, target=project, files=len(answers),
                   sign=[a["path"] for a in answers if a["state"] == "upload"], bytes=needed)
    expires = _expires()
    for answer in answers:
        session = answer.pop("session", None)
        if session is not None:
            url, headers = objectstore.sign_put(session.key, _b64(session.sha256), session.size, expires)
            answer.update(id=str(session.pk), url=url, headers=headers, size=session.size)
    return answers


def _expires() -> int:
    from django.conf import settings

    return settings.KAKEHASHI_UPLOAD_URL_SECONDS


def complete_batch(user, project: Project, ids) -> tuple[list[StoredFile], list[str]]:
    """Record the files of these uploads (the caller's own, open, of this project) whose objects the store holds;
    returns (the stored files, the ids whose object is not there yet: PUT them again, then complete again)."""
    _require_store()
    if not isinstance(ids, list) or not 1 <= len(ids) <= MAX_BATCH or not all(isinstance(i, str) for i in ids):
        raise StorageError(f"give between 1 and {MAX_BATCH} upload ids", field="ids")
    try:
        ids = [str(uuid.UUID(i)) for i in ids]
    except ValueError:
        raise StorageError("ids must be the upload ids the batch gave", field="ids") from None
    with transaction.atomic():
        Project.objects.select_for_update().filter(pk=project.pk).first()
        sessions = list(UploadSession.objects.select_for_update().filter(
            pk__in=ids, project=project, created_by=user, upload_id=""))
        known = {str(s.pk) for s in sessions}
        unknown = [i for i in ids if i not in known]
        if unknown:
            raise UploadNotFound(f"no upload of yours in this project has id {unknown[0][:40]}", field="ids")
        # An upload is its creator's: anyone else was told it does not exist, above; its creator must still be
        # allowed to submit in the project.
        access.require(user, project, "submit")
        done = [s for s in sessions if s.state == UploadState.COMPLETED]
        todo = [s for s in sessions if s.state == UploadState.OPEN]
        closed = [s for s in sessions if s.state not in (UploadState.OPEN, UploadState.COMPLETED)]
        if closed:
            raise UploadConflict(f"the upload of {closed[0].path} was {closed[0].state} ({closed[0].reason})",
                                 code=str(closed[0].state))
        held = store_call(_objects, [s.key for s in todo])
        arrived, missing = [], []
        for session in todo:
            size, written = held.get(session.key, (None, None))
            if size == session.size and written is not None and written >= session.created_at - CLOCK_SKEW:
                arrived.append(session)
            else:
                missing.append(str(session.pk))
        existing = {f.path: f for f in StoredFile.objects.filter(project=project, path__in=[s.path for s in arrived])}
        for session in arrived:
            stored = existing.get(session.path)
            if stored is not None and not session.overwrite:
                raise FileExists(f"{session.path} was added to project {project.slug} since this upload started; "
                                 "upload it with overwrite to replace that file", field="ids")
        quota.check(project, sum(s.size for s in arrived),
                    freed=sum(existing[s.path].size for s in arrived if s.path in existing), count_uploading=False)
        now, replaced, created, updated = timezone.now(), [], [], []
        for session in arrived:
            stored = existing.get(session.path)
            if stored is None:
                stored = StoredFile(project=project, path=session.path, storage_name=session.key, size=session.size,
                                    sha256=session.sha256, uploaded_by=user, state=FileState.READY)
                created.append(stored)
            else:
                if stored.storage_name != session.key:
                    replaced.append(stored.storage_name)
                stored.storage_name, stored.size, stored.sha256, stored.uploaded_by, stored.state = (
                    session.key, session.size, session.sha256, user, FileState.READY)
                stored.updated_at = now
                updated.append(stored)
            session.stored_file = stored
        StoredFile.objects.bulk_create(created)
        StoredFile.objects.bulk_update(updated, ["storage_name", "size", "sha256", "uploaded_by", "state",
                                                 "updated_at"])
        for session in arrived:
            session.state, session.ended_at, session.stored_file_id = (UploadState.COMPLETED, now,
                                                                       session.stored_file.pk)
        UploadSession.objects.bulk_update(arrived, ["state", "ended_at", "stored_file"])
        if arrived:
            record("file.upload_batch", actor=user, project=project, target=project, direct=True,
                   bytes=sum(s.size for s in arrived),
                   files=[{"path": s.path, "size": s.size, "sha256": s.sha256} for s in arrived],
                   replaced=[s.path for s in arrived if s.path in existing])
        for key in replaced:
            transaction.on_commit(lambda key=key: delete_object_quietly(key))
        if arrived:
            # Many small files together: the worker packs them for their first staging (portal/storage/packs.py).
            enqueue_on_commit(PACK_FILES, project.pk)
    files = [s.stored_file for s in done] + [s.stored_file for s in arrived]
    return [f for f in files if f is not None], missing


def _objects(keys: list[str]) -> dict[str, tuple[int, object]]:
    """(size, last modified) of the objects at these keys that exist: listed under their common prefix, 1,000 a
    request; a key the listing did not reach (a prefix holding far more than the batch) is asked by itself."""
    import os.path

    if not keys:
        return {}
    wanted = set(keys)
    found: dict[str, tuple[int, object]] = {}
    if len(keys) > 20:
        prefix = os.path.commonprefix(keys)
        for key, size, modified in objectstore.list_objects(prefix, pages=len(keys) // 1000 + 5):
            if key in wanted:
                found[key] = (size, modified)
    for key in wanted - set(found):
        head = objectstore.object_head(key)
        if head is not None:
            found[key] = head
    return found
