"""A project's storage quota: bytes of its files plus the uploads under way, against what its admins allow.

Checked when an upload is created (counting the other uploads under way, so parallel uploads cannot together
overrun it) and again when it completes (counting stored files only: the quota may have been lowered, or files
added through another path, in between). Callers hold the project's row lock around check-and-record.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.db.models import Sum
from django.template.defaultfilters import filesizeformat

from portal.projects.models import Project
from portal.storage.errors import QuotaExceeded


@dataclass(frozen=True)
class Usage:
    quota: int | None  # None: no limit
    stored: int
    uploading: int

    @property
    def left(self) -> int | None:
        return None if self.quota is None else max(0, self.quota - self.stored - self.uploading)


def quota_of(project: Project) -> int | None:
    limit = project.storage_quota_bytes
    if limit is None:
        limit = settings.KAKEHASHI_STORAGE_QUOTA_BYTES
    return limit or None


def usage(project: Project) -> Usage:
    from portal.storage.models import StoredFile, UploadSession, UploadState

    stored = StoredFile.objects.filter(project=project).aggregate(n=Sum("size"))["n"] or 0
    uploading = UploadSession.objects.filter(project=project, state=UploadState.OPEN).aggregate(n=Sum("size"))["n"] or 0
    return Usage(quota_of(project), stored, uploading)


def size_text(n: int) -> str:
    return filesizeformat(n).replace("\xa0", " ") + (f" ({n:,} bytes)" if n >= 1024 else "")


def check(project: Project, needed: int, *, freed: int = 0, count_uploading: bool = True) -> None:
    """Refuse (413 quota_exceeded) when `needed` more bytes, less `freed` ones (a file it replaces), do not fit."""
    current = usage(project)
    if current.quota is None:
        return
    uploading = current.uploading if count_uploading else 0
    left = current.quota - current.stored - uploading + freed
    if needed <= left:
        return
    under_way = f" and {size_text(uploading)} in uploads under way" if uploading else ""
    raise QuotaExceeded(
        f"project {project.slug} has {size_text(max(0, left))} left of its {size_text(current.quota)} storage quota "
        f"({size_text(current.stored)} in files{under_way}); this file needs {size_text(needed)}. Delete files, or "
        "ask the site admins for a larger quota",
        field="size",
    )
