"""The job list: filters, search and keyset pages, plain functions the view calls.

A page is "the next N jobs below this id" (`?after=`), newest first: one query of N+1 rows on the primary key's
order, whatever the page or the filters, never an OFFSET; the count of matching jobs stops at COUNT_LIMIT. Which jobs
the user may cancel on the page is known from their roles (actions.cancel.cancellable: two small queries), not
asked job by job.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import F, Q, QuerySet
from django.utils import timezone

from portal.clusters.models import Allocation, Cluster
from portal.jobs.actions.cancel import cancellable
from portal.jobs.models import FINAL_STATES, Job, JobState
from portal.jobs.queries import visible_jobs
from portal.projects import access
from portal.projects.models import Project

PAGE_SIZES = (25, 50, 100)
DEFAULT_PAGE_SIZE = 50
MAX_SEARCH = 100
COUNT_LIMIT = 10_000  # the list counts the matching jobs up to this many


@dataclass(frozen=True)
class JobFilter:
    project: str = ""  # slug
    cluster: str = ""  # slug
    state: str = ""
    name: str = ""  # the job's name begins with this
    q: str = ""  # anywhere in name, scheduler id or the submitter's user name
    mine: bool = False  # only the jobs the person submitted

    @classmethod
    def from_query(cls, params) -> JobFilter:
        state = params.get("state", "")
        return cls(project=params.get("project", "").strip()[:50], cluster=params.get("cluster", "").strip()[:50],
                   state=state if state in JobState.values else "", name=params.get("name", "").strip()[:63],
                   q=params.get("q", "").strip()[:MAX_SEARCH], mine=params.get("mine", "") == "1")

    def apply(self, jobs: QuerySet[Job]) -> QuerySet[Job]:
        if self.project:
            # The project's id as a constant, for the same reason as visible_jobs (its size is in the statistics).
            jobs = jobs.filter(project_id__in=list(Project.objects.filter(slug=self.project).values_list("pk", flat=True)))
        if self.cluster:
            jobs = jobs.filter(cluster__slug=self.cluster)
        if self.state:
            jobs = jobs.filter(state=self.state)
        if self.name:
            jobs = jobs.filter(name__startswith=self.name)
        if self.q:
            jobs = jobs.filter(Q(name__icontains=self.q) | Q(scheduler_id=self.q) | Q(user__username__iexact=self.q)
                               | (Q(pk=int(self.q)) if self.q.isdigit() and len(self.q) < 12 else Q(pk__in=[])))
        return jobs

    def query(self, **extra: object) -> dict[str, str]:
        """The filters as query parameters (for links to the next page), without the empty ones."""
        values = {"project": self.project, "cluster": self.cluster, "state": self.state, "name": self.name, "q": self.q,
                  "mine": "1" if self.mine else ""}
        values.update({k: str(v) for k, v in extra.items()})
        return {k: v for k, v in values.items() if v}


@dataclass
class Row:
    job: Job
    duration: timedelta | None  # ran so far (running) or in all (ended); None before it started
    can_cancel: bool

    @property
    def duration_text(self) -> str:
        return format_duration(self.duration)


@dataclass
class Page:
    rows: list[Row]
    next_after: int | None  # pass as ?after= for the next page; None on the last page
    size: int
    filters: JobFilter
    total: int = 0  # the jobs matching the filters, counted up to COUNT_LIMIT (total_text says "more than")
    projects: list = field(default_factory=list)  # what the filters may choose from
    clusters: list = field(default_factory=list)

    @property
    def total_text(self) -> str:
        if self.total > COUNT_LIMIT:
            return f"more than {COUNT_LIMIT:,} jobs"
        return f"{self.total:,} job{'s' if self.total != 1 else ''}"

    @property
    def any_cancellable(self) -> bool:
        return any(row.can_cancel for row in self.rows)


def run_duration(job: Job, now: datetime) -> timedelta | None:
    if job.started_at is None:
        return None
    end = job.ended_at or (now if job.state not in FINAL_STATES else None)
    return max(end - job.started_at, timedelta(0)) if end else None


def format_duration(value: timedelta | None) -> str:
    """ "2 h 05 min", "4 min 10 s", "12 s"; "" when unknown."""
    if value is None:
        return ""
    seconds = int(value.total_seconds())
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes:02d} min"
    if minutes:
        return f"{minutes} min {secs:02d} s"
    return f"{secs} s"


def page_size(raw: str | None) -> int:
    return int(raw) if raw and raw.isdigit() and int(raw) in PAGE_SIZES else DEFAULT_PAGE_SIZE


def job_page(user, filters: JobFilter, *, after: int | None = None, size: int = DEFAULT_PAGE_SIZE) -> Page:
    """Up to `size` of the jobs `user` can see that match `filters`, newest first, below the id `after`."""
    jobs = filters.apply(visible_jobs(user)).order_by("-pk")
    if filters.mine:
        jobs = jobs.filter(user=user)
    # How many match, counted no further than COUNT_LIMIT: one bounded query, so a page stays as cheap at 100,000
    # jobs as at 100 (docs/decisions/0023), and the list still says how many there are (issue 25).
    total = jobs.order_by()[: COUNT_LIMIT + 1].count()
    if after is not None:
        jobs = jobs.filter(pk__lt=after)
    # Whether the idle-GPU rule finds the job idle (portal/samples), in the same query: the list's "idle" badge.
    batch = list(jobs.annotate(gpu_state=F("samples__state"))[: size + 1])
    more = len(batch) > size
    batch = batch[:size]
    may = cancellable(user, batch)
    now = timezone.now()
    rows = [Row(job, run_duration(job, now), job.state not in FINAL_STATES and job.pk in may) for job in batch]
    return Page(rows=rows, next_after=batch[-1].pk if more and batch else None, size=size, filters=filters, total=total)


def filter_choices(user) -> tuple[list, list]:
    """The projects and clusters the filters offer: those the user can see."""
    projects = list(access.visible_projects(user).order_by("slug"))
    clusters = list(Cluster.objects.filter(pk__in=Allocation.objects.filter(project__in=projects)
                                           .values("cluster_id")).order_by("name"))
    return projects, clusters
