"""Packs: a project's small files also kept as a few large tar objects in the store (docs/decisions/0062).

A first staging of a folder of 10,000 small files would otherwise make 10,000 GETs, and the store's GETs a
second, not the wire, set its speed. With packs it reads a few ranges of a few objects; each file is still checked
by its SHA-256 on the login node, and one that does not arrive whole from a pack comes from its own object.

- After files arrive (a batch upload completed, a file uploaded) the worker packs the project's small files that no
  pack holds yet, once there are KAKEHASHI_PACK_MIN_FILES of them: each fetched from its own object, hashed, and
  written as a member named by its SHA-256 into one multipart upload (`pack_project`).
- A pack is claimed (its rows written, WRITING) under the project's row lock, so two workers never pack the same
  content twice; staging reads it once it is READY, its object whole.
- After files are deleted or replaced, a pack holding content that no file of the project holds any more is
  deleted, object and rows (`drop_stale`): deleting a file deletes its bytes from the packs too. What the dropped
  packs held for the remaining files is packed again.
"""

from __future__ import annotations

import logging
import uuid
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q, Subquery
from django.utils import timezone

from backends.spec import DataFile, Packed
from backends.staging_copy import FETCH_WHOLE, TarStream, member_size
from portal.projects.models import Project
from portal.storage import objectstore
from portal.storage.models import FileState, Pack, PackMember, PackState, StoredFile
from portal.storage.uploads import delete_object_quietly

log = logging.getLogger(__name__)

# At most as many files and bytes as one tar stream of staging carries (backends/staging.py BATCH_FILES).
PACK_FILES, PACK_BYTES = 5000, 1 << 30
# Files smaller than this are packed: those whose own GET costs more than their bytes (larger ones are streamed).
SMALL = FETCH_WHOLE
# A pack still being written after this long was left by a worker that died: dropped by the sweep.
WRITING_HOURS = 6
# How long a presigned GET of a pack (or of a file being packed) lives: signed when the bytes are about to move.
URL_SECONDS = 3600


def _get_url(key: str):
    return lambda: objectstore.presigned_get(key, URL_SECONDS, public=False)


def pack_project(project_id: int) -> int:
    """Drop the project's stale packs, then pack its small files that no pack holds. Returns how many files were
    packed (0 where there is no object store or too few files)."""
    if settings.KAKEHASHI_PACK_MIN_FILES <= 0 or not objectstore.configured():
        return 0
    project = Project.objects.filter(pk=project_id).first()
    if project is None:
        return 0
    drop_stale(project)
    packed = 0
    while (claimed := _claim(project)) is not None:
        packed += _write(*claimed)
    return packed


def _claim(project: Project) -> tuple[Pack, list[DataFile]] | None:
    """The next pack's files, its rows written (WRITING) in one transaction under the project's row lock."""
    with transaction.atomic():
        Project.objects.select_for_update().filter(pk=project.pk).first()
        held = PackMember.objects.filter(pack__project=project).values("sha256")
        rows = (StoredFile.objects.filter(project=project, state=FileState.READY, size__lt=SMALL)
                .exclude(sha256__in=Subquery(held)).order_by("sha256", "pk")
                .values_list("sha256", "size", "storage_name"))
        chosen: list[tuple[str, int, str]] = []
        total = 0
        for sha, size, key in rows.iterator(chunk_size=2000):
            if chosen and chosen[-1][0] == sha:
                continue  # the same content at two paths: one member
            if len(chosen) == PACK_FILES or total + member_size(size) > PACK_BYTES:
                break
            chosen.append((sha, size, key))
            total += member_size(size)
        if len(chosen) < settings.KAKEHASHI_PACK_MIN_FILES:
            return None
        pack = Pack.objects.create(project=project, storage_name=f"packs/{project.slug}/{uuid.uuid4().hex}.tar",
                                   size=total, files=len(chosen))
        members, offset = [], 0
        for sha, size, _ in chosen:
            members.append(PackMember(pack=pack, sha256=sha, offset=offset, size=size))
            offset += member_size(size)
        PackMember.objects.bulk_create(members, batch_size=2000)
    files = [DataFile("", sha, size, lambda: None, get_url=_get_url(key)) for sha, size, key in chosen]
    return pack, files


def _write(pack: Pack, files: list[DataFile]) -> int:
    """The pack's object, its members fetched from the files' own objects and hashed on the way; READY once whole.
    Returns how many members are intact."""
    stream = TarStream(files, archive_end=False, check=True)
    try:
        objectstore.upload_stream(pack.storage_name, _Full(stream), size_hint=pack.size)
        if [(sha, offset) for sha, offset, _, _ in stream.members] != list(
                pack.members.order_by("offset").values_list("sha256", "offset")):
            raise RuntimeError(f"pack {pack.storage_name} was not written where its rows say")
    except BaseException:
        Pack.objects.filter(pk=pack.pk).delete()
        _delete_quietly([pack.storage_name])
        raise
    finally:
        stream.close()
    damaged = [sha for sha, _, _, intact in stream.members if not intact]
    with transaction.atomic():
        if damaged:
            # The store's object is not what its row says: never read from the pack; its own object goes, and the
            # login node refuses it with the reason.
            PackMember.objects.filter(pack=pack, sha256__in=damaged).update(intact=False)
            log.warning("%d file(s) of project %s are not their SHA-256 in the store (pack %s)", len(damaged),
                        pack.project.slug, pack.storage_name)
        ready = Pack.objects.filter(pk=pack.pk, state=PackState.WRITING).update(state=PackState.READY)
    if not ready:  # dropped while it was written (a file of it deleted): its object goes too
        _delete_quietly([pack.storage_name])
        return 0
    return len(files) - len(damaged)


class _Full:
    """Reads as a file does, `size` bytes until the end: boto3 takes a shorter read for the end of the stream, and
    a tar stream gives a member's header and its bytes in separate reads."""

    def __init__(self, stream: TarStream) -> None:
        self._stream = stream

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            return b"".join(iter(lambda: self._stream.read(1 << 20), b""))
        parts, got = [], 0
        while got < size and (part := self._stream.read(size - got)):
            parts.append(part)
            got += len(part)
        return b"".join(parts)


def drop_stale(project: Project) -> int:
    """Delete the project's packs that hold content no file of the project holds any more, and those a dead
    worker left half-written. Returns how many."""
    live = StoredFile.objects.filter(project=project).values("sha256")
    stale = PackMember.objects.filter(pack__project=project).exclude(sha256__in=Subquery(live)).values("pack_id")
    cutoff = timezone.now() - timedelta(hours=WRITING_HOURS)
    return _drop(Pack.objects.filter(project=project).filter(
        Q(pk__in=Subquery(stale)) | Q(state=PackState.WRITING, created_at__lt=cutoff)))


def drop_abandoned() -> int:
    """The sweep's part: packs of any project left half-written by a worker that died."""
    cutoff = timezone.now() - timedelta(hours=WRITING_HOURS)
    return _drop(Pack.objects.filter(state=PackState.WRITING, created_at__lt=cutoff))


def _drop(packs) -> int:
    with transaction.atomic():
        names = list(packs.values_list("storage_name", flat=True))
        Pack.objects.filter(storage_name__in=names).delete()
        transaction.on_commit(lambda: _delete_quietly(names))
    return len(names)


def _delete_quietly(names: list[str]) -> None:
    for name in names:
        delete_object_quietly(name)


def places(project: Project, files) -> dict[str, Packed]:
    """Where the content of `files` (a queryset of the project's files) sits in the project's ready packs, by
    SHA-256: what staging reads instead of the files' own objects."""
    if not objectstore.configured():
        return {}
    rows = (PackMember.objects.filter(pack__project=project, pack__state=PackState.READY, intact=True,
                                      sha256__in=Subquery(files.values("sha256")))
            .values_list("sha256", "pack__storage_name", "offset"))
    urls: dict[str, object] = {}
    found: dict[str, Packed] = {}
    for sha, key, offset in rows.iterator(chunk_size=5000):
        if sha not in found:
            found[sha] = Packed(key, offset, urls.setdefault(key, _get_url(key)))
    return found
