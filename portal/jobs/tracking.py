"""Tracking: one status query per cluster per cycle, final states from accounting, silent jobs flagged.

Every change is a compare-and-swap on a locked row (`transition`), so a stale reading never moves a job
backwards and two trackers cannot both apply the same ending.
"""

from __future__ import annotations

import logging
import uuid as uuid_mod
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from functools import partial

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.db import transaction
from django.utils import timezone

from backends import backend_class
from backends.base import BackendError, JobRecord, JobStatus, State, TransportError
from portal.clusters.connect import NoClusterAccount, account_for, backend_for, monitor_account
from portal.clusters.models import Cluster
from portal.jobs import events, locks, transitions
from portal.jobs.models import FINAL_STATES, TRACKED_STATES, Job, JobState
from portal.projects.models import Project

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
    jobs = tracked_jobs(cluster)
    if not jobs:
        return report
    ids = [job.scheduler_id for job in jobs]
    report.queried = len(ids)
    try:
        # One identity asks about everyone's jobs: queues are readable by all users (docs/decisions/0003).
        backend = backend_for(cluster, monitor_account(cluster, _owners(jobs)))
        statuses = backend.statuses(ids)
        report.scheduler_calls += 1
        gone = [job for job in jobs if job.scheduler_id not in statuses or statuses[job.scheduler_id].state.is_final]
        # When the earliest of them was submitted: Grid Engine reads its accounting once for all of them then.
        since = min((job.submitted_at for job in gone if job.submitted_at), default=None)
        records = backend.final_records([job.scheduler_id for job in gone], submitted_since=since) if gone else {}
        if gone:
            report.scheduler_calls += 1
    except (BackendError, TransportError, NoClusterAccount) as exc:
        # Nothing is concluded from silence: jobs keep their state, the cluster says why it is not answering.
        Cluster.objects.filter(pk=cluster.pk).update(last_error=f"{timezone.now():%Y-%m-%d %H:%M:%S} {exc}"[:2000])
        report.error = str(exc)
        return report
    return apply_answers(cluster, jobs, statuses, records, report)


@dataclass(frozen=True, slots=True)
class Tracked:
    """What a cycle needs of each tracked job before it decides anything (its row is read again, locked, only
    if the scheduler's answer may move it): a tuple, not a model, as 10,000 models cost a second of CPU."""

    pk: int
    scheduler_id: str
    state: str
    uuid: uuid_mod.UUID
    user_id: int
    project_id: int
    submitted_at: datetime | None
    state_reason: str = ""


def tracked_jobs(cluster: Cluster) -> list[Tracked]:
    """The cluster's jobs the scheduler knows and the tracker must ask about, in pk order."""
    rows = (Job.objects.filter(cluster=cluster, state__in=TRACKED_STATES).exclude(scheduler_id="").order_by("pk")
            .values_list("pk", "scheduler_id", "state", "uuid", "user_id", "project_id", "submitted_at",
                         "state_reason"))
    return [Tracked(*row) for row in rows]


def _owners(jobs: list[Tracked]) -> Iterator[tuple[object, Project]]:
    """The (user, project) owners of the jobs, read one by one as monitor_account asks (usually only the first)."""
    for user_id, project_id in dict.fromkeys((job.user_id, job.project_id) for job in jobs):
        yield get_user_model().objects.get(pk=user_id), Project.objects.get(pk=project_id)


def apply_answers(cluster: Cluster, jobs: list[Tracked], statuses: dict[str, JobStatus], records: dict[str, JobRecord],
                  report: TrackReport) -> TrackReport:
    """What the scheduler's answers (queue and accounting) mean for the tracked `jobs`, written in bulk: a fixed
    number of statements per cycle, whatever the number of jobs (bench/tracking.py feeds it scheduler output of
    10,000 jobs)."""
    now = timezone.now()
    Cluster.objects.filter(pk=cluster.pk).update(last_contact_at=now, last_error="")
    # How a cancel made on this cluster outside the portal is named in a job's history ("scancel by root").
    program = backend_class(cluster.kind).cancel_program
    decisions: dict[int, tuple[str, Decision]] = {}
    stuck = []
    for job in jobs:
        status = statuses.get(job.scheduler_id)
        record_ = records.get(job.scheduler_id)
        if record_ is not None and not record_.settled and not _accounting_overdue(job, now, _flush_seconds(cluster)):
            # Accounting may hold only the records of tasks the job started, not yet its own (Grid Engine's
            # parallel tasks): their ending well is not the job's. Waited for as a record not written yet is, for
            # as long as the cluster takes to write its accounting out.
            report.awaiting_accounting += 1
            continue
        if record_ is not None:
            decisions[job.pk] = ("finished", partial(_finished, rec=record_, program=program))
        elif status is not None and status.state.is_final:
            # The queue says it ended but accounting has no record (yet, or none is configured). A stuck entry
            # ends at once: it never ran, so there is no exit code or time to wait for, and it blocks the queue.
            if not status.stuck and not _accounting_overdue(job, now):
                report.awaiting_accounting += 1
                continue
            fallback = JobRecord(job.scheduler_id, status.state, status.exit_code, reason=status.reason)
            decisions[job.pk] = ("finished", partial(_finished, rec=fallback, program=program))
        elif status is not None:
            if job.state != _STATE_MAP[status.state]:
                decisions[job.pk] = ("changed", partial(_seen, expected=job.state, new=_STATE_MAP[status.state],
                                                        reason=status.reason))
        elif job.state != JobState.LOST:  # already flagged: nothing to decide until it is heard of again
            decisions[job.pk] = ("lost", partial(_silent, now=now))
        if status is not None and status.stuck:
            stuck.append(job.pk)
    for kind in _apply(decisions):
        setattr(report, kind, getattr(report, kind) + 1)
    for job_id in stuck:
        report.removed += remove_stuck_entry(job_id)
    # A waiting job says why it waits and, where the scheduler predicts it (Slurm's backfill plan), when it should
    # start: what a session's page and the hub's spawn page show meanwhile. Written when it changes, one UPDATE per
    # distinct wording.
    expected: dict[str, list[int]] = defaultdict(list)
    for job in jobs:
        status = statuses.get(job.scheduler_id)
        if job.pk not in decisions and job.state == JobState.PENDING and status is not None and (
                status.reason or status.expected_start) and (words := waiting_words(status)) != job.state_reason:
            expected[words].append(job.pk)
    for words, ids in expected.items():
        transitions.update(ids, where={"state": JobState.PENDING}, stamp=False, state_reason=words)
    # Bookkeeping: when the scheduler last knew each job (what tells a quiet job from a lost one).
    transitions.update([job.pk for job in jobs if job.scheduler_id in statuses or job.scheduler_id in records],
                       stamp=False, last_seen_at=now)
    return report


def waiting_words(status: JobStatus) -> str:
    """"Resources; expected to start 2026-11-27 04:10 UTC" (the scheduler's reason, then its prediction)."""
    if status.expected_start is None:
        return status.reason
    when = f"expected to start {status.expected_start:%Y-%m-%d %H:%M} UTC"
    return f"{status.reason}; {when}" if status.reason else when


# What to do with a job, decided on its locked (fresh) row: a move, or None to leave it as it is.
Decision = Callable[[Job], "transitions.Move | None"]


def _apply(decisions: dict[int, tuple[str, Decision]]) -> list[str]:
    """Decide on every job's locked row and write all the moves at once (one lock statement, one UPDATE, one
    INSERT of events, the endings settled together): the cycle's statements do not grow with its jobs.
    Returns the kind of each move made."""
    if not decisions:
        return []
    with transaction.atomic():
        kinds, moves = [], []
        for job in locks.jobs(sorted(decisions)):
            kind, decide = decisions[job.pk]
            move = decide(job)
            if move is not None:
                kinds.append(kind)
                moves.append(move)
        transitions.apply(moves)
    return kinds


def _flush_seconds(cluster: Cluster) -> int:
    """How long the cluster's scheduler may take to write a job's accounting record out: its option
    `accounting_flush_seconds` (Grid Engine's `reporting_params flush_time`), else the site's grace."""
    value = (cluster.options or {}).get("accounting_flush_seconds")
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return settings.KAKEHASHI_ACCOUNTING_GRACE_SECONDS


def _accounting_overdue(job: Tracked, now, grace: int | None = None) -> bool:
    """Whether accounting has had its grace period (the site's, or `grace`) since the queue first said this job
    ended.

    The first sighting lives in the cache: losing it only restarts the wait.
    """
    grace = settings.KAKEHASHI_ACCOUNTING_GRACE_SECONDS if grace is None else grace
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
    return bool(_apply({job_id: ("changed", partial(_seen, expected=expected, new=new, reason=reason))}))


def _seen(job: Job, *, expected: str, new: str, reason: str) -> transitions.Move | None:
    if job.state != expected or new not in {JobState.PENDING, JobState.RUNNING}:
        return None
    if new == JobState.PENDING and job.state in {JobState.RUNNING, JobState.LOST}:
        return None  # never move backwards on a stale reading
    fields = {}
    if new == JobState.RUNNING and job.started_at is None:
        fields["started_at"] = timezone.now()
    return transitions.Move(job, new, events.seen(new, reason), fields)


def finish_job(job_id: int, rec: JobRecord, *, program: str = "") -> bool:
    return bool(_apply({job_id: ("finished", partial(_finished, rec=rec, program=program))}))


def _finished(job: Job, *, rec: JobRecord, program: str) -> transitions.Move | None:
    if job.state in FINAL_STATES:
        return None
    new = _STATE_MAP[rec.state]
    if job.cancel_requested_at and new in {JobState.FAILED, JobState.CANCELLED}:
        # Who or what asked and why (the cancel's own cause), not the scheduler's "cancelled by 1001" (a uid) or
        # "exit code 143".
        new, event = JobState.CANCELLED, events.cancelled_as_asked(job.cancel_cause, job.cancel_reason, rec)
    else:
        event = events.ended(new, rec, cancel_program=program)
    started = rec.started_at or job.started_at
    ended = rec.ended_at or timezone.now()
    elapsed = rec.elapsed_seconds
    if elapsed is None and started is not None:
        elapsed = max(int((ended - started).total_seconds()), 0)
    return transitions.Move(job, new, event, {"exit_code": rec.exit_code, "exit_signal": rec.signal,
                                               "started_at": started, "ended_at": ended,
                                               "elapsed_seconds": elapsed})


def flag_lost_if_silent(job_id: int, now) -> bool:
    """A job neither the queue nor accounting knows is flagged `lost` once it has been silent long enough."""
    return bool(_apply({job_id: ("lost", partial(_silent, now=now))}))


def _silent(job: Job, *, now) -> transitions.Move | None:
    if job.state not in {JobState.PENDING, JobState.RUNNING}:
        return None
    last = job.last_seen_at or job.submitted_at or job.updated_at
    if job.cancel_requested_at and (now - job.cancel_requested_at).total_seconds() > 5:
        # Schedulers keep no accounting for a job deleted while it waited (SGE, for one): that is our cancel.
        return transitions.Move(job, JobState.CANCELLED, events.cancelled_as_asked(
            job.cancel_cause, job.cancel_reason, note=" (the scheduler keeps no record)"), {"ended_at": now})
    if last and (now - last).total_seconds() < settings.KAKEHASHI_LOST_AFTER_SECONDS:
        return None
    return transitions.Move(job, JobState.LOST, events.lost())


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
        transitions.note(job, events.stuck_entry_not_deleted(str(exc)))
        return 0
    transitions.note(job, events.stuck_entry_deleted())
    return 1
