"""Tracking: one status query per cluster per cycle, final states from accounting, silent jobs flagged.

Every change is a compare-and-swap on a locked row (`transition`), so a stale reading never moves a job
backwards and two trackers cannot both apply the same ending.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.conf import settings
from django.core.cache import cache
from django.db import transaction
from django.utils import timezone

from backends.base import BackendError, JobRecord, State, TransportError
from portal.clusters.connect import NoClusterAccount, account_for, backend_for, monitor_account
from portal.clusters.models import Cluster
from portal.jobs import events, locks, transitions
from portal.jobs.models import FINAL_STATES, TRACKED_STATES, Job, JobState
from portal.jobs.outcome import exit_text

logger = logging.getLogger(__name__)

_STATE_MAP = {
    State.PENDING: JobState.PENDING,
    State.RUNNING: JobState.RUNNING,
    State.COMPLETED: JobState.COMPLETED,
    State.FAILED: JobState.FAILED,
    State.CANCELLED: JobState.CANCELLED,
    State.TIMED_OUT: JobState.TIMED_OUT,
}


@dataclass
class TrackReport:
    queried: int = 0
    changed: int = 0
    finished: int = 0
    lost: int = 0
    scheduler_calls: int = 0
    removed: int = 0
    awaiting_accounting: int = 0
    error: str = ""


def track_cluster(cluster_id: int) -> TrackReport:
    """One status query for all of a cluster's active jobs; final states from accounting; lost ones flagged."""
    report = TrackReport()
    cluster = Cluster.objects.get(pk=cluster_id)
    jobs = list(
        Job.objects.filter(cluster=cluster, state__in=TRACKED_STATES)
        .exclude(scheduler_id="")
        .select_related("user", "project")
        .order_by("pk")
    )
    if not jobs:
        return report
    ids = [job.scheduler_id for job in jobs]
    report.queried = len(ids)
    try:
        # One identity asks about everyone's jobs: queues are readable by all users (docs/decisions/0003).
        backend = backend_for(cluster, monitor_account(cluster, [(job.user, job.project) for job in jobs]))
        statuses = backend.statuses(ids)
        report.scheduler_calls += 1
        gone = [job for job in jobs if job.scheduler_id not in statuses or statuses[job.scheduler_id].state.is_final]
        records = backend.final_records([job.scheduler_id for job in gone]) if gone else {}
        if gone:
            report.scheduler_calls += 1
    except (BackendError, TransportError, NoClusterAccount) as exc:
        # Nothing is concluded from silence: jobs keep their state, the cluster says why it is not answering.
        Cluster.objects.filter(pk=cluster.pk).update(last_error=f"{timezone.now():%Y-%m-%d %H:%M:%S} {exc}"[:2000])
        report.error = str(exc)
        return report
    now = timezone.now()
    Cluster.objects.filter(pk=cluster.pk).update(last_contact_at=now, last_error="")
    for job in jobs:
        status = statuses.get(job.scheduler_id)
        record_ = records.get(job.scheduler_id)
        if record_ is not None:
            if finish_job(job.pk, record_):
                report.finished += 1
        elif status is not None and status.state.is_final:
            # The queue says it ended but accounting has no record (yet, or none is configured). A stuck entry
            # ends at once: it never ran, so there is no exit code or time to wait for, and it blocks the queue.
            if not status.stuck and not _accounting_overdue(job, now):
                report.awaiting_accounting += 1
                continue
            fallback = JobRecord(job.scheduler_id, status.state, status.exit_code, reason=status.reason)
            if finish_job(job.pk, fallback):
                report.finished += 1
        elif status is not None:
            if apply_status(job.pk, job.state, _STATE_MAP[status.state], status.reason):
                report.changed += 1
        else:
            if flag_lost_if_silent(job.pk, now):
                report.lost += 1
        if status is not None and status.stuck:
            report.removed += remove_stuck_entry(job.pk)
    transitions.mark_seen([job.pk for job in jobs if job.scheduler_id in statuses or job.scheduler_id in records], now)
    return report


def _accounting_overdue(job: Job, now) -> bool:
    """Whether accounting has had its grace period since the queue first said this job ended.

    The first sighting lives in the cache: losing it only restarts the wait.
    """
    grace = settings.KAKEHASHI_ACCOUNTING_GRACE_SECONDS
    if grace <= 0:
        return True
    key = f"kakehashi:queue-ended:{job.uuid}"
    cache.add(key, now.timestamp(), timeout=grace * 20)
    first_seen = cache.get(key, now.timestamp())
    return now.timestamp() - first_seen >= grace


def apply_status(job_id: int, expected: str, new: str, reason: str = "") -> bool:
    """Compare-and-swap: change state only if nobody changed it since we read `expected`."""
    if expected == new:
        return False
    with transaction.atomic():
        job = locks.job(job_id)
        if job.state != expected or new not in {JobState.PENDING, JobState.RUNNING}:
            return False
        if new == JobState.PENDING and job.state in {JobState.RUNNING, JobState.LOST}:
            return False  # never move backwards on a stale reading
        fields = {}
        if new == JobState.RUNNING and job.started_at is None:
            fields["started_at"] = timezone.now()
        transitions.transition(job, new, reason=reason or "seen by the scheduler", **fields)
    return True


def finish_job(job_id: int, rec: JobRecord) -> bool:
    with transaction.atomic():
        job = locks.job(job_id)
        if job.state in FINAL_STATES:
            return False
        new = _STATE_MAP[rec.state]
        reason = rec.reason or {
            JobState.COMPLETED: "completed",
            JobState.FAILED: exit_text(rec.exit_code, rec.signal) or "failed",
            JobState.CANCELLED: "cancelled",
            JobState.TIMED_OUT: "walltime exceeded",
        }[new]
        if job.cancel_requested_at and new in {JobState.FAILED, JobState.CANCELLED}:
            # Who or what asked and why, not the scheduler's "cancelled by 1001" (a uid) or "exit code 143".
            new, reason = JobState.CANCELLED, job.cancel_reason or "cancelled by request"
        started = rec.started_at or job.started_at
        ended = rec.ended_at or timezone.now()
        elapsed = rec.elapsed_seconds
        if elapsed is None and started is not None:
            elapsed = max(int((ended - started).total_seconds()), 0)
        transitions.transition(
            job,
            new,
            reason=reason,
            exit_code=rec.exit_code,
            exit_signal=rec.signal,
            started_at=started,
            ended_at=ended,
            elapsed_seconds=elapsed,
        )
    return True


def flag_lost_if_silent(job_id: int, now) -> bool:
    """A job neither the queue nor accounting knows is flagged `lost` once it has been silent long enough."""
    with transaction.atomic():
        job = locks.job(job_id)
        if job.state not in {JobState.PENDING, JobState.RUNNING}:
            return False
        last = job.last_seen_at or job.submitted_at or job.updated_at
        if job.cancel_requested_at and (now - job.cancel_requested_at).total_seconds() > 5:
            # Schedulers keep no accounting for a job deleted while it waited (SGE, for one): that is our cancel.
            transitions.transition(job, JobState.CANCELLED, ended_at=now,
                                   reason=f"{job.cancel_reason or 'cancelled by request'} (the scheduler keeps no record)")
            return True
        if last and (now - last).total_seconds() < settings.KAKEHASHI_LOST_AFTER_SECONDS:
            return False
        transitions.transition(
            job,
            JobState.LOST,
            reason="neither the scheduler's queue nor its accounting knows this job; an admin should check it",
        )
    return True


def remove_stuck_entry(job_id: int) -> int:
    """Delete a queue entry that will never run, once the portal has recorded the job's end (1 if deleted).

    Grid Engine keeps a job it could not start in error state (Eqw) until someone deletes it, and it counts
    against the user's limits meanwhile. Deleting waits for the recorded failure so that the cause, which
    accounting holds, is already on the job page. The delete runs as the job's owner (the monitoring account
    may not delete other users' jobs); if it fails, the job page says so and the entry is left to the site.
    """
    job = Job.objects.select_related("cluster", "user", "project").get(pk=job_id)
    if job.state not in FINAL_STATES:
        return 0
    try:
        backend_for(job.cluster, account_for(job.cluster, job.user, job.project)).cancel(job.scheduler_id)
    except (BackendError, TransportError, NoClusterAccount) as exc:
        logger.warning("could not delete stuck scheduler job %s of job %s: %s", job.scheduler_id, job.pk, exc)
        events.noted(job, f"still in the scheduler's queue in an error state; deleting it failed: {exc}")
        return 0
    events.noted(job, "deleted from the scheduler's queue, where it was stuck in an error state")
    return 1
