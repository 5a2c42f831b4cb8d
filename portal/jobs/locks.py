"""Every row lock taken on jobs, by name, in primary-key order (Saleor's `lock_objects.py` shape).

The lock order, everywhere: a job's row (a sweep's rows in pk order) first, then its project's budget row
(portal/budgets/locks.py). `transitions.apply` settles money while it holds the job, so code that holds a
budget row never waits for a job; two transactions taking rows in this order cannot deadlock. Call inside a
transaction.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.db.models import Case, Exists, OuterRef, Q, Subquery, Value, When

from portal.clusters.models import Allocation
from portal.jobs.models import Job, JobOutput, JobState


def job(job_id: int, *, for_dispatch: bool = False) -> Job:
    """One job, with what its transitions read (project, cluster, hardware); `for_dispatch` adds what its
    JobSpec reads (owner, software, the allocation's scheduler group as `allocation_group`, whether datasets are
    attached as `has_datasets`) and the cluster account it runs as to the same statement."""
    jobs = Job.objects.select_for_update(of=("self",)).select_related("project", "cluster", "hardware")
    if for_dispatch:
        jobs = _for_dispatch(jobs)
    return jobs.get(pk=job_id)


def _for_dispatch(jobs):
    group = Allocation.objects.filter(project=OuterRef("project_id"), cluster=OuterRef("cluster_id")).values("group")
    # Whether it has datasets to stage, in the same statement: most jobs have none and need no query for them.
    attached = Job.datasets.through.objects.filter(job_id=OuterRef("pk"))
    return jobs.select_related("user", "software", "cluster_account").annotate(
        allocation_group=Subquery(group[:1]), has_datasets=Exists(attached))


def job_and_queued_siblings(job_id: int, limit: int, kinds: Sequence[str]) -> list[Job]:
    """The job first (as `job(for_dispatch=True)` reads it), then up to `limit - 1` other QUEUED jobs that run as
    the same account on the same cluster (same cluster, owner and project; a cluster of one of `kinds`; no sweep
    array element, no datasets to stage), in pk order: one statement. Rows another transaction holds are skipped,
    the job's own too: [] then, and the caller waits for the job alone with `job`."""
    one = Job.objects.filter(pk=job_id)
    siblings = Q(
        state=JobState.QUEUED, array_index__isnull=True, has_datasets=False, cluster__kind__in=list(kinds),
        cluster_id=Subquery(one.values("cluster_id")), user_id=Subquery(one.values("user_id")),
        project_id=Subquery(one.values("project_id")),
    )
    jobs = _for_dispatch(Job.objects.select_for_update(of=("self",), skip_locked=True)
                         .select_related("project", "cluster", "hardware"))
    rows = list(jobs.filter(Q(pk=job_id) | siblings)
                .order_by(Case(When(pk=job_id, then=Value(0)), default=Value(1)), "pk")[:max(limit, 1)])
    return rows if rows and rows[0].pk == job_id else []


def queued_of(cluster_id: int, user_id: int, project_id: int, limit: int) -> list[Job]:
    """Up to `limit` QUEUED jobs of this account (cluster, owner, project) that `job_and_queued_siblings` would take
    along, locked, skipping rows another transaction holds, in pk order."""
    jobs = _for_dispatch(Job.objects.select_for_update(of=("self",), skip_locked=True)
                         .select_related("project", "cluster", "hardware"))
    return list(jobs.filter(state=JobState.QUEUED, array_index__isnull=True, has_datasets=False, cluster_id=cluster_id,
                            user_id=user_id, project_id=project_id).order_by("pk")[:limit])


def dispatched(job_ids: Sequence[int]) -> list[Job]:
    """Jobs one dispatch handed over, in pk order, to record what the scheduler answered."""
    return list(Job.objects.select_for_update(of=("self",)).select_related("project", "cluster", "hardware")
                .filter(pk__in=list(job_ids)).order_by("pk"))


# What a tracking cycle's decisions and transitions read and write of a job (tracking.py, transitions.apply): the rest (scripts, notebooks, 40 more columns) would be most of a 10,000-job cycle's CPU.
# A field missing here is read by one query per job: tests/jobs/test_tracking_scale.py would count them.
TRACKING_FIELDS = (
    "id", "state", "state_reason", "updated_at", "started_at", "ended_at", "exit_code", "exit_signal", "elapsed_seconds",
    "cost_amount", "last_seen_at", "submitted_at", "cancel_requested_at", "cancel_reason", "cancel_cause", "scheduler_id",
    "template", "nodes",
    "user", "project", "name", "kind", "group",  # the owner is told of an ending, a sweep's once (portal/jobs/notices.py)
    "estimate_unit", "hardware", "hardware__rate", "hardware__rate_unit",
)


def jobs(job_ids: list[int]) -> list[Job]:
    """Many jobs, in pk order, with what a tracking cycle's transitions read (TRACKING_FIELDS)."""
    return list(Job.objects.select_for_update(of=("self",)).select_related("hardware").only(*TRACKING_FIELDS)
                .filter(pk__in=job_ids).order_by("pk"))


def group_jobs(group_id: int, *, submitting_only: bool = False) -> list[Job]:
    """The jobs of a sweep, in pk order; only those being submitted, if asked."""
    jobs = Job.objects.select_for_update().filter(group_id=group_id)
    if submitting_only:
        jobs = jobs.filter(state=JobState.SUBMITTING)
    return list(jobs.order_by("pk"))


def job_if_present(job_id: int) -> Job | None:
    """One job's row alone, or None if it is gone: what a compare-and-swap reads before it moves the job
    (transitions' portable compare-and-swap, on SQLite)."""
    return Job.objects.select_for_update().filter(pk=job_id).first()


def job_row(job_id: int) -> None:
    """A job's row only, to serialise work on the job that writes no job field (collecting its outputs)."""
    Job.objects.select_for_update().filter(pk=job_id).first()


def job_output(job: Job, stream: str) -> JobOutput:
    """The portal's copy of one of a job's streams (taken after the job's row, when both are locked)."""
    return JobOutput.objects.select_for_update().get(job=job, stream=stream)
