"""Direct uploads: a file goes from the browser or the CLI straight into the object store, never through Django.

The flow (the same for the Data page's Uppy, `kakehashi upload` and any API client):
1. create: the uploader gives path and size (and, if it has it already, the whole file's SHA-256). The portal
   checks the path, the role and the quota, and starts an S3 multipart upload, or hands back the caller's open
   upload of the same path and size: that is how a closed tab or a dropped CLI resumes.
2. sign: for each part, the uploader sends the part's SHA-256 and gets a presigned PUT carrying it as a signed
   header; the store refuses bytes that do not match it.
3. list: the parts the store already holds, each with the SHA-256 signed for it, so a resumed upload compares
   them with its own file and sends only the rest.
4. complete (with the whole file's SHA-256, which the uploader computes while the parts travel): the portal lists
   the parts, checks that every part is there with the right size (so the size is the
   one claimed), hands the store the part checksums it signed (the store checks them against the bytes it
   received and records their composite), and only then records a StoredFile. Or abort.

How far the whole-file SHA-256 is verified: a file of one part is checked exactly at completion (that part's SHA-256,
checked by the store on arrival, is the file's). A file of several parts is listed as `verifying` at completion
(not downloadable, not a dataset's, not staged to any job) and a worker (portal/storage/verify.py) reads the joined object
back, hashing it as it streams (a few MiB of memory whatever the size): the SHA-256 the uploader gave makes it
ready; any other deletes the object, frees the quota and refuses the upload, saying why. A file it replaced
keeps its bytes until then (and is put back on a refusal).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import logging
import re
import uuid
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from portal.audit.actions import record
from portal.enqueue import PACK_FILES, VERIFY_UPLOAD, enqueue_on_commit
from portal.projects import access
from portal.projects.models import Project
from portal.storage import objectstore, quota
from portal.storage.actions import check_no_file_folder_clash, clean_path, storage_key
from portal.storage.errors import FileExists, StorageError, StoreUnavailable, UploadConflict
from portal.storage.models import FileState, StoredFile, UploadPart, UploadSession, UploadState

log = logging.getLogger(__name__)

MIN_PART_BYTES = 5 * 1024 * 1024  # S3's smallest part (but the last)
MAX_PARTS = 10_000  # S3's most parts per upload
MAX_SIGN_AT_ONCE = 100
_SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")


MAX_PART_BYTES = 5 * 1024**3  # S3's largest part


def part_size_for(size: int, requested: int | None = None) -> int:
    """The part size the uploader asked for (the Data page asks for small parts, so an interrupted upload keeps
    most of what it sent) or else the site's, grown in whole MiB for files that would need more than S3's 10,000
    parts."""
    part = requested if requested else int(settings.KAKEHASHI_UPLOAD_PART_BYTES)
    part = min(MAX_PART_BYTES, max(MIN_PART_BYTES, part))
    if size > part * MAX_PARTS:
        mib = 1024 * 1024
        part = -(-size // MAX_PARTS // mib) * mib + mib
    return part



def _require_store() -> None:
    if not objectstore.configured():
        raise UploadConflict(
            "this portal keeps files on its own disk (no object store is configured): upload through the portal "
            "with POST /api/v1/projects/<slug>/files/ instead", code="no_object_store")


def store_call(fn, *args):
    try:
        return fn(*args)
    except objectstore.ObjectStoreError as exc:
        if exc.code == "Unreachable":
            raise StoreUnavailable(f"{exc.message}; try again shortly") from None
        raise


def _free_key(project: Project, path: str) -> str:
    """projects/<slug>/<path>, or a variant of it while that key holds a file or another upload's target: a
    replaced file keeps its bytes until the new ones are complete."""
    key = storage_key(project, path)
    # A file renamed or moved keeps its key (portal/storage/manage.py): any file's key is taken, not only this path's.
    while StoredFile.objects.filter(storage_name=key).exists() or \
            UploadSession.objects.filter(key=key, state=UploadState.OPEN).exists():
        key = storage_key(project, f"{path}.~{uuid.uuid4().hex[:8]}")
    return key


def _clean_size(size) -> int:
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise StorageError("size must be the file's size in bytes (a whole number, 0 or more)", field="size")
    if size > MAX_PARTS * 5 * 1024**3:
        raise StorageError("the file is larger than an object store can hold in one object (48.8 TiB)", field="size")
    return size


def _clean_sha256(sha256) -> str:
    value = sha256.strip().lower() if isinstance(sha256, str) else ""
    if not _SHA256_HEX.match(value):
        raise StorageError("sha256 must be the whole file's SHA-256 as 64 hexadecimal digits", field="sha256")
    return value


EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


def create_upload(user, project: Project, *, path: str, size: int, sha256: str | None = None,
                  overwrite: bool = False, part_size: int | None = None) -> tuple[UploadSession, bool]:
    """Start (or resume) a direct upload. Returns (the upload, whether it is one the caller had already started).

    An open upload of the caller's to the same path with the same size is resumed (unless the SHA-256s given
    differ): the uploader then checks the parts held against its file (`uploaded_parts` gives their checksums).
    """
    access.require(user, project, "submit")
    _require_store()
    clean = clean_path(path)
    storage_key(project, clean)  # refuses a path too long for a key before anything is created
    check_no_file_folder_clash(project, clean)
    size = _clean_size(size)
    sha256 = EMPTY_SHA256 if size == 0 else (_clean_sha256(sha256) if sha256 else "")
    with transaction.atomic():
        # One project's creations and completions take turns: the quota cannot be overrun by racing uploads.
        Project.objects.select_for_update().filter(pk=project.pk).first()
        resumable = UploadSession.objects.filter(project=project, path=clean, size=size, created_by=user,
                                                 state=UploadState.OPEN)
        if sha256:
            resumable = resumable.filter(sha256__in=["", sha256])
        resumable = resumable.order_by("-last_activity_at").first()
        if resumable is not None:
            resumable.overwrite = resumable.overwrite or overwrite
            resumable.sha256 = resumable.sha256 or sha256
            resumable.save(update_fields=["overwrite", "sha256", "last_activity_at"])
            return resumable, True
        existing = StoredFile.objects.filter(project=project, path=clean).first()
        if existing is not None and not overwrite:
            raise FileExists(f"{clean} already exists in project {project.slug}; upload with overwrite to replace it",
                             field="path")
        _not_verifying(existing)
        quota.check(project, size, freed=existing.size if existing is not None else 0)
        session = UploadSession(project=project, path=clean, key=_free_key(project, clean), size=size,
                                sha256=sha256, part_size=part_size_for(size, part_size), overwrite=overwrite,
                                created_by=user)
        if size == 0:
            # Nothing to send: the portal writes the empty object itself and the upload is complete at once.
            store_call(objectstore.put_empty_object, session.key)
            session.save()
            _finish(user, session, existing)
            return session, False
        # Inside the transaction: if recording fails, the multipart upload is left to the abandoned-upload sweep.
        session.upload_id = store_call(objectstore.create_multipart_upload, session.key)
        session.save()
        record("upload.start", actor=user, project=project, target=session, path=clean, size=size, sha256=sha256)
    return session, False


def _not_verifying(existing: StoredFile | None) -> None:
    if existing is not None and existing.state == FileState.VERIFYING:
        raise UploadConflict(f"{existing.path} is being verified (its whole-file SHA-256 is checked after upload); "
                             "replace it once the Data page shows it ready", code="verifying", field="path")


def _open(session: UploadSession) -> None:
    if session.state == UploadState.COMPLETED:
        raise UploadConflict(f"this upload of {session.path} is already complete", code="already_completed")
    if session.state == UploadState.ABORTED:
        raise UploadConflict(f"this upload of {session.path} was aborted ({session.reason}); start a new one",
                             code="aborted")
    if session.state == UploadState.REFUSED:
        raise UploadConflict(f"this upload of {session.path} was refused ({session.reason}); start a new one",
                             code="refused")


def _clean_part_checksum(value) -> str:
    try:
        raw = base64.b64decode(value, validate=True) if isinstance(value, str) else b""
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != 32:
        raise StorageError("each part's sha256 must be its SHA-256 digest in base64 (44 characters)", field="parts")
    return base64.b64encode(raw).decode()


def sign_parts(user, session: UploadSession, parts: list[dict]) -> list[dict]:
    """Presigned PUTs for the given parts ({"number", "sha256"}), each carrying its checksum as a signed header."""
    access.require(user, session.project, "submit")
    _open(session)
    if not isinstance(parts, list) or not parts or len(parts) > MAX_SIGN_AT_ONCE:
        raise StorageError(f"give between 1 and {MAX_SIGN_AT_ONCE} parts to sign", field="parts")
    wanted: dict[int, str] = {}
    for part in parts:
        number = part.get("number") if isinstance(part, dict) else None
        if isinstance(number, bool) or not isinstance(number, int) or not 1 <= number <= session.part_count:
            raise StorageError(f"part numbers of this upload run from 1 to {session.part_count}", field="parts")
        wanted[number] = _clean_part_checksum(part.get("sha256"))
    with transaction.atomic():
        UploadPart.objects.bulk_create(
            [UploadPart(session=session, number=n, sha256=c) for n, c in wanted.items()],
            update_conflicts=True, unique_fields=["session", "number"], update_fields=["sha256"],
        )
        UploadSession.objects.filter(pk=session.pk).update(last_activity_at=timezone.now())
        # Signed URLs let their holder write into the project's store: who was given them, and for which parts.
        record("upload.sign", actor=user, project=session.project, target=session, path=session.path,
               parts=sorted(wanted))
    expires = settings.KAKEHASHI_UPLOAD_URL_SECONDS
    signed = []
    for number, checksum in wanted.items():
        url, headers = objectstore.sign_part(session.key, session.upload_id, number, checksum, expires)
        signed.append({"number": number, "size": session.expected_part_size(number), "url": url, "headers": headers})
    return signed


def uploaded_parts(user, session: UploadSession) -> list[tuple[objectstore.Part, str]]:
    """The parts the store holds, each with the SHA-256 (base64) the portal signed for it."""
    access.require(user, session.project, "submit")
    _open(session)
    UploadSession.objects.filter(pk=session.pk).update(last_activity_at=timezone.now())
    signed = dict(session.parts.values_list("number", "sha256"))
    parts = store_call(objectstore.list_parts, session.key, session.upload_id)
    return [(part, signed.get(part.number, "")) for part in parts]


def _part_problems(session: UploadSession, parts: list[objectstore.Part], signed: dict[int, str]) -> list[str]:
    held = {part.number: part for part in parts}
    problems = []
    missing = [n for n in range(1, session.part_count + 1) if n not in held]
    if missing:
        shown = ", ".join(map(str, missing[:10])) + (" …" if len(missing) > 10 else "")
        problems.append(f"{len(missing)} of {session.part_count} parts are not uploaded yet (part {shown})")
    for number, part in sorted(held.items()):
        if number > session.part_count:
            problems.append(f"part {number} is beyond the file's {session.part_count} parts")
        elif part.size != session.expected_part_size(number):
            problems.append(f"part {number} has {part.size} bytes where the file's size needs "
                            f"{session.expected_part_size(number)}")
        elif number not in signed:
            problems.append(f"part {number} was not signed by the portal")
    return problems


def complete_upload(user, session: UploadSession, sha256: str | None = None,
                    etags: dict[int, str] | None = None) -> StoredFile:
    """Join the parts into the file and record it, after checking size and checksums (see the module's doc).
    `sha256` is the whole file's, unless it was given when the upload was created; `etags` are the ETags the
    store answered the uploader's PUTs with (they pick the right copy of a part sent twice)."""
    access.require(user, session.project, "submit")
    given = _clean_sha256(sha256) if sha256 else ""
    refusal: StorageError | None = None
    with transaction.atomic():
        Project.objects.select_for_update().filter(pk=session.project_id).first()
        session = UploadSession.objects.select_for_update().select_related("project").get(pk=session.pk)
        _open(session)
        if given and session.sha256 and given != session.sha256:
            raise StorageError("sha256 differs from the one given when the upload started: the file changed; "
                               "start a new upload", field="sha256")
        if not (given or session.sha256):
            raise StorageError("give the whole file's sha256 (64 hexadecimal digits) to complete the upload",
                               field="sha256")
        if given and not session.sha256:
            session.sha256 = given
            session.save(update_fields=["sha256"])
        project = session.project
        existing = StoredFile.objects.filter(project=project, path=session.path).first()
        if existing is not None and not session.overwrite:
            raise FileExists(f"{session.path} was added to project {project.slug} since this upload started; "
                             "complete it with overwrite to replace that file", field="path")
        _not_verifying(existing)
        check_no_file_folder_clash(project, session.path)  # again: a file "a" may have arrived meanwhile for "a/b"
        parts = store_call(objectstore.list_parts, session.key, session.upload_id, etags or {})
        signed = dict(session.parts.values_list("number", "sha256"))
        problems = _part_problems(session, parts, signed)
        if problems:
            raise StorageError("the upload is not complete: " + "; ".join(problems), field="parts")
        if session.part_count == 1 and signed[1] != base64.b64encode(bytes.fromhex(session.sha256)).decode():
            refusal = StorageError("the file's bytes do not match its sha256 (the one part the store checked has "
                                   "another SHA-256): the upload was aborted; check the file and upload it again",
                                   field="sha256")
        else:
            try:
                quota.check(project, session.size, freed=existing.size if existing is not None else 0,
                            count_uploading=False)
            except StorageError as exc:
                refusal = exc
        if refusal is None:
            try:
                objectstore.complete_multipart_upload(session.key, session.upload_id,
                                                      [(part, signed[part.number]) for part in parts])
            except objectstore.ObjectStoreError as exc:
                if exc.code == "BadDigest":
                    raise StorageError("a part's bytes do not match the SHA-256 signed for it: upload that part "
                                       "again (sign it with its checksum) and complete again",
                                       field="parts") from None
                if exc.code != "NoSuchUpload" or objectstore.object_size(session.key) != session.size:
                    raise StoreUnavailable(f"the object store did not complete the upload ({exc.message})") from None
                # NoSuchUpload with the object in place: completed before, but its reply was lost.
            stored_size = store_call(objectstore.object_size, session.key)
            if stored_size != session.size:
                objectstore.delete_object(session.key)
                refusal = StorageError(f"the store holds {stored_size} bytes where {session.size} were announced: "
                                       "the upload was aborted; upload the file again", field="size")
            else:
                return _finish(user, session, existing, verify=session.part_count > 1)
    _abort(session, refusal.message)
    raise refusal


def _finish(user, session: UploadSession, existing: StoredFile | None, *, verify: bool = False) -> StoredFile:
    """Record the completed object as the project's file at the upload's path (in the caller's transaction).
    `verify`: a file of several parts, listed as verifying until portal/storage/verify.py has hashed it; a file it replaces
    keeps its object (the session remembers it) until then."""
    state = FileState.VERIFYING if verify else FileState.READY
    replaced = {}
    if existing is None:
        stored = StoredFile.objects.create(project=session.project, path=session.path, storage_name=session.key,
                                           size=session.size, sha256=session.sha256, uploaded_by=user, state=state)
        old_key = None
    else:
        old_key = existing.storage_name
        if verify and old_key != session.key:
            replaced = {"replaced_key": old_key, "replaced_size": existing.size, "replaced_sha256": existing.sha256}
        existing.storage_name, existing.size, existing.sha256, existing.uploaded_by, existing.state = (
            session.key, session.size, session.sha256, user, state)
        existing.save()
        stored = existing
    UploadSession.objects.filter(pk=session.pk).update(state=UploadState.COMPLETED, stored_file=stored,
                                                       ended_at=timezone.now(), **replaced)
    session.state, session.stored_file = UploadState.COMPLETED, stored
    record("file.upload", actor=user, project=session.project, target=stored, path=stored.path, size=stored.size,
           sha256=stored.sha256, replaced=old_key is not None, direct=True, verifying=verify)
    if verify:
        enqueue_on_commit(VERIFY_UPLOAD, str(session.pk))
    elif old_key and old_key != session.key:
        transaction.on_commit(lambda: delete_object_quietly(old_key))
    # A new small file may complete a pack; replaced content leaves its pack (portal/storage/packs.py).
    enqueue_on_commit(PACK_FILES, session.project_id)
    return stored


def delete_object_quietly(key: str) -> None:
    try:
        objectstore.delete_object(key)
    except objectstore.ObjectStoreError:
        log.warning("could not delete the object %s from the store: it stays there", key, exc_info=True)


def _abort(session: UploadSession, reason: str) -> None:
    """Abort in the store, then record it; a store that cannot be reached leaves it open for the sweep."""
    if session.upload_id:
        store_call(objectstore.abort_multipart_upload, session.key, session.upload_id)
    UploadSession.objects.filter(pk=session.pk, state=UploadState.OPEN).update(
        state=UploadState.ABORTED, reason=reason[:500], ended_at=timezone.now())
    session.state, session.reason = UploadState.ABORTED, reason[:500]


def abort_upload(user, session: UploadSession) -> UploadSession:
    access.require(user, session.project, "submit")
    _open(session)
    _abort(session, "cancelled by the uploader")
    record("upload.abort", actor=user, project=session.project, target=session, path=session.path)
    return session


def abort_abandoned_uploads(now=None) -> int:
    """Abort open uploads untouched for KAKEHASHI_UPLOAD_ABANDON_HOURS, and multipart uploads the store holds
    under projects/ that no open upload knows (e.g. a create whose reply was lost). Returns how many."""
    if not objectstore.configured():
        return 0
    now = now or timezone.now()
    cutoff = now - timedelta(hours=settings.KAKEHASHI_UPLOAD_ABANDON_HOURS)
    count = 0
    for session in UploadSession.objects.filter(state=UploadState.OPEN, last_activity_at__lt=cutoff):
        try:
            _abort(session, f"abandoned: no activity for {settings.KAKEHASHI_UPLOAD_ABANDON_HOURS} h")
            count += 1
        except StorageError:
            log.warning("could not abort the abandoned upload %s", session.pk, exc_info=True)
    known = set(UploadSession.objects.filter(state=UploadState.OPEN).values_list("upload_id", flat=True))
    try:
        # Under packs/: a pack's upload whose worker died (portal/storage/packs.py).
        for prefix in ("projects/", "packs/"):
            for key, upload_id, started in objectstore.open_multipart_uploads(prefix):
                if upload_id not in known and started < cutoff:
                    objectstore.abort_multipart_upload(key, upload_id)
                    count += 1
    except objectstore.ObjectStoreError:
        log.warning("could not list or abort the store's multipart uploads; the next sweep tries again", exc_info=True)
    return count
