"""The one writer of a Job's lifecycle: new jobs, state changes, notes and the dispatch bookkeeping.

Everything here runs on rows the caller locked (portal/jobs/locks.py), in the caller's transaction. A state
change is checked against ALLOWED_TRANSITIONS and written with its event (portal/jobs/events.py); when a job
ends its cost is settled (budget row locked after the job's, as the lock order says) and a worker is asked, by
task name once the transaction commits, to bring its output home.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import Any

from django.db import connection
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
        _after_ending([(job, to, actor)])


@dataclass
class Move:
    """One locked job to `to`, with its own reason and the fields the move sets."""

    job: Job
    to: str
    reason: str
    fields: dict[str, Any] = field(default_factory=dict)


def transition_each(moves: Sequence[Move], *, actor=None) -> None:
    """`transition` for many locked jobs, each to its own state with its own reason (the tracker's cycle): one
    UPDATE, one INSERT of events and, for the endings, their money settled together, however many jobs move."""
    if not moves:
        return
    now = timezone.now()
    changed = {"state", "state_reason", "updated_at"}
    history = []
    for move in moves:
        job = move.job
        job.check_transition(move.to)
        history.append((job, job.state, move.to, move.reason))
        job.state, job.state_reason, job.updated_at = move.to, move.reason, now
        for name, value in move.fields.items():
            setattr(job, name, value)
        changed.update(move.fields)
    endings = [move.job for move in moves if move.to in FINAL_STATES]
    conversions: dict = {}  # one lookup per pair of units, not one per ending
    costs = [(job, _actual_cost(job, conversions)) for job in endings]
    if any(actual is not None for _, actual in costs):
        changed.add("cost_amount")
    _write_each([move.job for move in moves], sorted(changed))
    events.moved_each(history, actor=actor)
    budgets.settle_many(costs)
    _after_ending([(move.job, move.to, actor) for move in moves if move.to in FINAL_STATES])


def _write_each(jobs: Sequence[Job], names: Sequence[str]) -> None:
    """Write each job's own values of `names` in one UPDATE joined to one array per column (unnest).

    Why not bulk_update: its CASE WHEN id = … per row and field costs O(jobs²) in PostgreSQL and much Python per
    job (1,000 jobs: 9 s); this is one statement with one parameter per column, whatever the number of jobs.
    """
    if connection.vendor != "postgresql":  # `make run`'s SQLite has no unnest: the portable way, same values
        Job.objects.bulk_update(jobs, list(names))
        return
    fields = [Job._meta.pk] + [Job._meta.get_field(name) for name in names]
    quote, table = connection.ops.quote_name, connection.ops.quote_name(Job._meta.db_table)
    types = [Job._meta.pk.rel_db_type(connection)] + [field.db_type(connection) for field in fields[1:]]
    columns = ", ".join(quote(field.column) for field in fields)
    arrays = ", ".join(f"%s::{db_type}[]" for db_type in types)
    assignments = ", ".join(f"{quote(field.column)} = v.{quote(field.column)}" for field in fields[1:])
    # The values as Python has them (psycopg adapts datetimes, decimals, None); a state is an enum: its value.
    values = [[_plain(getattr(job, field.attname)) for job in jobs] for field in fields]
    with connection.cursor() as cursor:
        # Identifiers come from the model's own meta; every value is a bound parameter.
        cursor.execute(f"UPDATE {table} SET {assignments} FROM unnest({arrays}) AS v({columns}) "  # noqa: S608
                       f"WHERE {table}.{quote(fields[0].column)} = v.{quote(fields[0].column)}", values)


def _plain(value: Any) -> Any:
    return value.value if isinstance(value, Enum) else value


def _after_ending(endings: Sequence[tuple[Job, str, Any]]) -> None:
    """What follows jobs' endings, in their transaction: the owners are told (in bulk), outputs fetched after commit."""
    notifications.jobs_ended([(job, kind) for job, to, actor in endings if (kind := _notice(job, to, actor))])
    for job, to, _ in endings:
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
    if also:  # values of each job's own: one UPDATE that sets every field row by row
        _write_each(jobs, ["state", "state_reason", "updated_at", *fields, *also])
    else:
        Job.objects.filter(pk__in=[job.pk for job in jobs]).update(state=to, state_reason=reason, updated_at=now,
                                                                    **fields)
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
    actual = _actual_cost(job)
    if actual is not None:
        job.save(update_fields=["cost_amount"])
    budgets.settle(job, actual)


def _actual_cost(job: Job, conversions: dict | None = None):
    """What an ended job costs, set on it (not saved); None where it has no rate."""
    if job.hardware is None or not job.estimate_unit:
        return None
    seconds = job.elapsed_seconds or 0
    job.cost_amount = budgets.cost(job.hardware.rate, job.hardware.rate_unit, job.nodes, seconds,
                                   job.estimate_unit, conversions).amount
    return job.cost_amount
