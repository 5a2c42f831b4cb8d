"""A project's storage quota: bytes of its files plus the uploads under way, against what its admins allow.

Checked when an upload is created (counting the other uploads under way, so parallel uploads cannot together
overrun it) and again when it completes (counting stored files only: the quota may have been lowered, or files
added through another path, in between). Callers hold the project's row lock around check-and-record.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.db.models import Sum

from backends.spec import size_text as _size_text
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
    return usages([project])[0][1]


def usages(projects: list[Project]) -> list[tuple[Project, Usage]]:
    """`usage` of each project, in two statements however many there are (the Data page lists a site admin's every
    project: two statements each made a page of twenty projects forty statements more)."""
    from portal.storage.models import StoredFile, UploadSession, UploadState

    ids = [project.pk for project in projects]
    stored = dict(StoredFile.objects.filter(project_id__in=ids).values("project_id").order_by().annotate(n=Sum("size"))
                  .values_list("project_id", "n"))
    uploading = dict(UploadSession.objects.filter(project_id__in=ids, state=UploadState.OPEN).values("project_id").order_by()
                     .annotate(n=Sum("size")).values_list("project_id", "n"))
    return [(project, Usage(quota_of(project), stored.get(project.pk) or 0, uploading.get(project.pk) or 0))
            for project in projects]


def size_text(n: int | float, *, exact: bool = False) -> str:
    """The one unit rule for sizes, on pages (the `size` filter), in messages, in upload.js and the CLI: binary
    multiples named as such (1.0 GiB is 1,073,741,824 bytes; Django's filesizeformat calls that "1.0 GB").
    `exact` adds the byte count, for limits a researcher compares a file against."""
    return _size_text(n) + (f" ({int(n):,} bytes)" if exact and n >= 1024 else "")


def check(project: Project, needed: int, *, freed: int = 0, count_uploading: bool = True) -> None:
    """Refuse (413 quota_exceeded) when `needed` more bytes, less `freed` ones (a file it replaces), do not fit."""
    current = usage(project)
    if current.quota is None:
        return
    uploading = current.uploading if count_uploading else 0
    left = current.quota - current.stored - uploading + freed
    if needed <= left:
        return
    under_way = f" and {size_text(uploading, exact=True)} held by unfinished uploads" if uploading else ""
    # Say only what can be done: files to delete when there are some, unfinished uploads to abort when they hold space.
    ways = []
    if current.stored:
        ways.append("delete files")
    if uploading:
        ways.append("abort unfinished uploads (the Data page lists them; until aborted they hold space for "
                    f"{settings.KAKEHASHI_UPLOAD_ABANDON_HOURS} h after their last activity)")
    ways.append("ask the site admins for a larger quota")
    raise QuotaExceeded(
        f"project {project.slug} has {size_text(max(0, left), exact=True)} left of its {size_text(current.quota, exact=True)} storage quota "
        f"({size_text(current.stored, exact=True)} in files{under_way}); this file needs {size_text(needed, exact=True)}. "
        f"{(said := ', or '.join(ways))[0].upper()}{said[1:]}",
        field="size",
    )
