"""A project's storage quota: bytes of its files plus the uploads under way, against what its admins allow.

Checked when an upload is created (counting the other uploads under way, so parallel uploads cannot together
overrun it) and again when it completes (counting stored files only: the quota may have been lowered, or files
added through another path, in between). Callers hold the project's row lock around check-and-record.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.db.models import Sum

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


def size_text(n: int | float, *, exact: bool = False) -> str:
    """The one unit rule for sizes, on pages (the `size` filter), in messages, in upload.js and the CLI: binary
    multiples named as such (1.0 GiB is 1,073,741,824 bytes; Django's filesizeformat calls that "1.0 GB").
    `exact` adds the byte count, for limits a researcher compares a file against."""
    value, unit = float(n), "B"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            break
        value /= 1024
    shown = f"{value:.0f} B" if unit == "B" else f"{value:.1f} {unit}"
    return shown + (f" ({int(n):,} bytes)" if exact and n >= 1024 else "")


def check(project: Project, needed: int, *, freed: int = 0, count_uploading: bool = True) -> None:
    """Refuse (413 quota_exceeded) when `needed` more bytes, less `freed` ones (a file it replaces), do not fit."""
    current = usage(project)
    if current.quota is None:
        return
    uploading = current.uploading if count_uploading else 0
    left = current.quota - current.stored - uploading + freed
    if needed <= left:
        return
    under_way = f" and {size_text(uploading, exact=True)} in uploads under way" if uploading else ""
    raise QuotaExceeded(
        f"project {project.slug} has {size_text(max(0, left), exact=True)} left of its {size_text(current.quota, exact=True)} storage quota "
        f"({size_text(current.stored, exact=True)} in files{under_way}); this file needs {size_text(needed, exact=True)}. Delete files, or "
        "ask the site admins for a larger quota",
        field="size",
    )
