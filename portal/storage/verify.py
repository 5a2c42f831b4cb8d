"""Whole-file SHA-256 of an upload of several parts, checked by a worker after completion (docs/decisions/0009).

S3 checks each part against the SHA-256 signed for it, but cannot hash the joined object: without this step the
whole file's SHA-256 would be only the uploader's claim. Completion lists such a file as `verifying`; the task
`verify_upload_task` reads the object back from the store a chunk at a time (bounded memory whatever the size),
and the SHA-256 given makes the file ready, any other removes it: the object is deleted (the quota no longer
counts it), a file it replaced gets its own bytes back, and the upload is `refused` with the reason.
"""

from __future__ import annotations

import hashlib
import time
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from portal.audit.actions import record
from portal.enqueue import VERIFY_UPLOAD, enqueue
from portal.projects.models import Project
from portal.storage import objectstore
from portal.storage.models import FileState, StoredFile, UploadSession, UploadState
from portal.storage.uploads import delete_object_quietly, store_call

HASH_CHUNK = 4 * 1024 * 1024  # bytes read from the store at a time
VERIFY_HEARTBEAT_SECONDS = 30  # a verification in progress touches its upload this often
VERIFY_STALE_SECONDS = 600  # a verification untouched this long was lost (a killed worker): the sweep asks again


def _hash_object(session: UploadSession) -> tuple[int, str]:
    """(bytes, SHA-256) of the upload's object as the store serves it, read a chunk at a time; the upload is
    touched every VERIFY_HEARTBEAT_SECONDS so the sweep knows the verification is alive."""
    digest, size = hashlib.sha256(), 0
    beat = time.monotonic()
    body = store_call(objectstore.open_stream, session.key)
    try:
        for chunk in body.iter_chunks(HASH_CHUNK):
            digest.update(chunk)
            size += len(chunk)
            if time.monotonic() - beat > VERIFY_HEARTBEAT_SECONDS:
                UploadSession.objects.filter(pk=session.pk).update(last_activity_at=timezone.now())
                beat = time.monotonic()
    finally:
        body.close()
    return size, digest.hexdigest()


def verify_upload(session_id) -> str:
    """Hash a completed upload of several parts in the store and make its file ready, or refuse it (worker side):
    the object is deleted (freeing the quota), a file it replaced gets its bytes back, and the upload says why.
    Idempotent: a file already decided, deleted or replaced meanwhile is left alone."""
    session = UploadSession.objects.select_related("project", "stored_file").filter(pk=session_id).first()
    stored = session.stored_file if session is not None else None
    if (session is None or session.state != UploadState.COMPLETED or stored is None
            or stored.state != FileState.VERIFYING or stored.storage_name != session.key):
        return "nothing to verify"
    try:
        size, sha256 = _hash_object(session)
    except objectstore.ObjectStoreError as exc:
        if exc.code not in {"NoSuchKey", "404", "NotFound"}:
            raise  # unreachable or failing: the task retries
        size, sha256 = 0, ""
    with transaction.atomic():
        Project.objects.select_for_update().filter(pk=session.project_id).first()
        stored = StoredFile.objects.select_for_update().filter(
            pk=stored.pk, storage_name=session.key, state=FileState.VERIFYING).first()
        if stored is None:
            return "nothing to verify"
        if (size, sha256) == (session.size, session.sha256):
            stored.state = FileState.READY
            stored.save(update_fields=["state", "updated_at"])
            record("file.verified", actor=session.created_by, project=session.project, target=stored, path=stored.path,
                   size=size, sha256=sha256)
            if session.replaced_key:
                transaction.on_commit(lambda: delete_object_quietly(session.replaced_key))
            return "verified"
        found = f"{size} bytes with SHA-256 {sha256}" if sha256 else "no object"
        reason = (f"the file's bytes do not match its sha256: the store holds {found}, not {session.sha256}; the "
                  "file was removed: check the file and upload it again")
        if session.replaced_key:  # the file it replaced is itself again
            stored.storage_name, stored.size, stored.sha256, stored.state = (
                session.replaced_key, session.replaced_size or 0, session.replaced_sha256, FileState.READY)
            stored.save()
        else:
            stored.delete()
        UploadSession.objects.filter(pk=session.pk).update(state=UploadState.REFUSED, reason=reason[:500],
                                                           stored_file=None)
        record("upload.refused", actor=session.created_by, project=session.project, target=session,
               path=session.path, size=size, sha256=sha256, claimed=session.sha256)
        transaction.on_commit(lambda: delete_object_quietly(session.key))
    return "refused"


def lost_verifications(now=None) -> int:
    """Ask again for verifications nobody has touched for VERIFY_STALE_SECONDS (a worker killed mid-hash)."""
    now = now or timezone.now()
    stale = UploadSession.objects.filter(state=UploadState.COMPLETED, stored_file__state=FileState.VERIFYING,
                                         last_activity_at__lt=now - timedelta(seconds=VERIFY_STALE_SECONDS))
    count = 0
    for session_id in stale.values_list("pk", flat=True):
        UploadSession.objects.filter(pk=session_id).update(last_activity_at=now)
        enqueue(VERIFY_UPLOAD, str(session_id))
        count += 1
    return count
