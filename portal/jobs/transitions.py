"""The one writer of a Job's lifecycle: new jobs, state changes, notes and the dispatch bookkeeping.

Everything here runs on rows the caller locked (portal/jobs/locks.py), in the caller's transaction. A state
change is checked against ALLOWED_TRANSITIONS and written with its event (portal/jobs/events.py); when a job
ends its cost is settled (budget row locked after the job's, as the lock order says) and a worker is asked, by
task name once the transaction commits, to bring its output home.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.utils import timezone

from portal import enqueue
from portal.budgets import actions as budgets
from portal.catalog import job_templates
from portal.jobs import events
from portal.jobs.models import FINAL_STATES, Job, JobState
from portal.notifications import actions as notifications
from portal.notifications.models import Kind


def record_new(jobs: Sequence[Job], *, reason: str, actor=None) -> None:
    """Save prepared jobs (queued) and their first events."""
    Job.objects.bulk_create(jobs)
    events.submitted(jobs, reason=reason, actor=actor)


def transition(job: Job, to: str, *, reason: str = "", actor=None, **fields: Any) -> None:
    """Move a locked job to `to`, write its event, and settle money when it ends."""
    job.check_transition(to)
    from_state = job.state
    job.state = to
    job.state_reason = reason
    for name, value in fields.items():
        setattr(job, name, value)
    job.save()
    events.moved([(job, from_state)], to, reason=reason, actor=actor)
    if to in FINAL_STATES:
        _settle(job)
        kind = _notice(job, to, actor)
        if kind:
            notifications.job_ended(job, kind)
        if job.scheduler_id:
            # Keep the final stdout/stderr in the portal: the cluster's copy may be purged later.
            enqueue.enqueue_on_commit(enqueue.FETCH_OUTPUT, job.pk)
            template = job_templates.get(job.template)
            if template is not None and template.records_health and to == JobState.COMPLETED:
                enqueue.enqueue_on_commit(enqueue.RECORD_HEALTH_CHECK, job.pk)


def transition_many(jobs: Sequence[Job], to: str, *, reason: str, actor=None, also: Sequence[str] = (),
                    **fields: Any) -> None:
    """`transition` for many locked jobs at once (a sweep's array): one UPDATE and one INSERT of events.

    Only for moves that end nothing: an ending settles money job by job, through `transition`. `also` names
    fields the caller already set on each job to a value of its own (e.g. its element's scheduler id).
    """
    if to in FINAL_STATES:
        raise ValueError("endings go through transition(), one job at a time")
    if not jobs:
        return
    now = timezone.now()
    moves = []
    for job in jobs:
        job.check_transition(to)
        moves.append((job, job.state))
        job.state, job.state_reason, job.updated_at = to, reason, now
        for name, value in fields.items():
            setattr(job, name, value)
    Job.objects.filter(pk__in=[job.pk for job in jobs]).update(state=to, state_reason=reason, updated_at=now, **fields)
    if also:
        Job.objects.bulk_update(jobs, list(also))
    events.moved(moves, to, reason=reason, actor=actor)


def note(job: Job, reason: str, *, actor=None, **fields: Any) -> None:
    """Record on a locked job something that changes no state (a cancel asked for), with the fields it sets."""
    update([job], **fields)
    events.noted(job, reason, actor=actor)


def update(jobs: Sequence[Job], **fields: Any) -> None:
    """Bookkeeping that changes no state and needs no event (a dispatch lease, why a submit will be retried)."""
    if not jobs or not fields:
        return
    now = timezone.now()
    for job in jobs:
        for name, value in fields.items():
            setattr(job, name, value)
        job.updated_at = now
    Job.objects.filter(pk__in=[job.pk for job in jobs]).update(updated_at=now, **fields)


def mark_seen(job_ids: Sequence[int], at: datetime) -> None:
    """The scheduler still knows these jobs (what tells a quiet job from a lost one)."""
    if job_ids:
        Job.objects.filter(pk__in=job_ids).update(last_seen_at=at)


def mark_reminded(job_id: int, at: datetime) -> bool:
    """Note that the owner was reminded of a long-running job; False if someone already did (compare-and-set)."""
    return Job.objects.filter(pk=job_id, reminded_at__isnull=True).update(reminded_at=at) == 1


# How portal/usage/enforcement.py words a strict budget's cancel (its note, or a queued job's ending reason).
BUDGET_CANCEL_WORDS = "reached its strict budget"


def _notice(job: Job, to: str, actor) -> str | None:
    """What the owner is told of this ending: nothing when they cancelled it themselves."""
    if to == JobState.COMPLETED:
        return Kind.ENDED
    if to != JobState.CANCELLED:
        return Kind.FAILED
    if BUDGET_CANCEL_WORDS in job.state_reason or job.events.filter(
            actor__isnull=True, reason__contains=BUDGET_CANCEL_WORDS).exists():
        return Kind.BUDGET
    if actor is not None and actor.pk == job.user_id:
        return None
    return Kind.ENDED


def _settle(job: Job) -> None:
    actual = None
    if job.hardware is not None and job.estimate_unit:
        seconds = job.elapsed_seconds or 0
        actual = budgets.cost(job.hardware.rate, job.hardware.rate_unit, job.nodes, seconds, job.estimate_unit).amount
        job.cost_amount = actual
        job.save(update_fields=["cost_amount"])
    budgets.settle(job, actual)
