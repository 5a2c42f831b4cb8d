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
from portal.audit.actions import record, record_each_sql
from portal.budgets import actions as budgets
from portal.catalog import job_templates
from portal.jobs import events, locks
from portal.jobs.models import ALLOWED_TRANSITIONS, FINAL_STATES, IllegalTransition, Job, JobState
from portal.notifications import actions as notifications
from portal.notifications.models import Kind


def record_new(jobs: Sequence[Job], *, reason: str, actor=None, audit: dict[str, Any] | None = None) -> None:
    """Save prepared jobs (queued) and their first events; with `audit` (record's arguments: action, project,
    data…), an audit row for each job too.

    On PostgreSQL one statement: the jobs inserted from one array per column (no model or row of parameters per
    job: a 1,000-point sweep is one INSERT of 50 arrays), their events and audit rows inserted from what it
    returns (data-modifying CTEs, docs/decisions/0024). Elsewhere (`make run`'s SQLite) the portable way.
    """
    if connection.vendor != "postgresql":
        Job.objects.bulk_create(jobs)
        events.submitted(jobs, reason=reason, actor=actor)
        if audit is not None:
            for job in jobs:
                record(audit["action"], actor=actor, project=audit.get("project"), target=job, **audit.get("data", {}))
        return
    insert, params = _insert_sql(jobs)
    parts = [f"new_jobs AS ({insert} RETURNING id, uuid)"]
    first_events, event_params = events.moved_from_sql("new_jobs", "", JobState.QUEUED, reason=reason, actor=actor)
    parts.append(f"first_events AS ({first_events})")
    params += event_params
    if audit is not None:
        audit_sql, audit_params = record_each_sql(audit["action"], source="new_jobs", target=Job, actor=actor,
                                                  project=audit.get("project"), **audit.get("data", {}))
        parts.append(f"audit AS ({audit_sql})")
        params += audit_params
    with connection.cursor() as cursor:
        # Each part's identifiers come from the models' meta; every value is a bound parameter.
        cursor.execute(f"WITH {', '.join(parts)} SELECT id, uuid FROM new_jobs", params)  # noqa: S608
        ids = {uuid: pk for pk, uuid in cursor.fetchall()}
    for job in jobs:
        job.pk = ids[job.uuid]
        job._state.adding, job._state.db = False, connection.alias


def _insert_sql(jobs: Sequence[Job]) -> tuple[str, list]:
    """INSERT INTO job (every column but id) SELECT * FROM unnest(one array per column), and its parameters."""
    now = timezone.now()
    columns, params = [], []
    for column in Job._meta.concrete_fields:
        if column.primary_key:
            continue
        if getattr(column, "auto_now", False) or getattr(column, "auto_now_add", False):
            for job in jobs:
                setattr(job, column.attname, now)
            values = [now] * len(jobs)
        elif column.get_internal_type() == "JSONField":  # adapted by the field (psycopg's Jsonb)
            values = [column.get_db_prep_save(getattr(job, column.attname), connection) for job in jobs]
        else:
            values = [_plain(getattr(job, column.attname)) for job in jobs]
        columns.append((column.column, column.db_type(connection)))
        params.append(values)
    quote = connection.ops.quote_name
    names = ", ".join(quote(column) for column, _ in columns)
    arrays = ", ".join(f"%s::{db_type}[]" for _, db_type in columns)
    # Identifiers come from the model's own meta; every value is a bound parameter.
    return f"INSERT INTO {quote(Job._meta.db_table)} ({names}) SELECT * FROM unnest({arrays})", params  # noqa: S608


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
    sql, values = _update_each_sql(jobs, names)
    with connection.cursor() as cursor:
        cursor.execute(sql, values)


def _update_each_sql(jobs: Sequence[Job], names: Sequence[str]) -> tuple[str, list]:
    """_write_each's UPDATE (PostgreSQL), for a writer that sends it with the jobs' events in one statement."""
    fields = [Job._meta.pk] + [Job._meta.get_field(name) for name in names]
    quote, table = connection.ops.quote_name, connection.ops.quote_name(Job._meta.db_table)
    types = [Job._meta.pk.rel_db_type(connection)] + [field.db_type(connection) for field in fields[1:]]
    columns = ", ".join(quote(field.column) for field in fields)
    arrays = ", ".join(f"%s::{db_type}[]" for db_type in types)
    assignments = ", ".join(f"{quote(field.column)} = v.{quote(field.column)}" for field in fields[1:])
    # The values as Python has them (psycopg adapts datetimes, decimals, None); a state is an enum: its value.
    values = [[_plain(getattr(job, field.attname)) for job in jobs] for field in fields]
    # Identifiers come from the model's own meta; every value is a bound parameter.
    return (f"UPDATE {table} SET {assignments} FROM unnest({arrays}) AS v({columns}) "  # noqa: S608
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
    if connection.vendor != "postgresql":  # `make run`'s SQLite: the portable way, same rows
        if also:  # values of each job's own: one UPDATE that sets every field row by row
            _write_each(jobs, ["state", "state_reason", "updated_at", *fields, *also])
        else:
            Job.objects.filter(pk__in=[job.pk for job in jobs]).update(state=to, state_reason=reason, updated_at=now,
                                                                        **fields)
        events.moved(moves, to, reason=reason, actor=actor)
        return
    # One statement: the UPDATE (each job's own values, one array per column) and the events' INSERT beside it.
    update_sql, update_params = _update_each_sql(jobs, ["state", "state_reason", "updated_at", *fields, *also])
    events_sql, events_params = events.moved_each_sql([(job, from_state, to, reason) for job, from_state in moves],
                                                      actor=actor)
    with connection.cursor() as cursor:
        cursor.execute(f"WITH moved AS ({update_sql}) {events_sql}", update_params + events_params)


def transition_if(job: Job, from_state: str, to: str, *, reason: str, actor=None, **fields: Any) -> bool:
    """Compare-and-swap on a job the caller has not locked: move it from `from_state` to `to` with its event only if
    it is still there (False if not), and set `fields`. On PostgreSQL one statement (the UPDATE's WHERE takes the
    row lock and checks the state on the newest row version; the event is inserted from what it returns).
    `job.cancel_requested_at` is refreshed from the row (a cancel asked for meanwhile)."""
    if to in FINAL_STATES:
        raise ValueError("endings go through transition(), one job at a time")
    if to not in ALLOWED_TRANSITIONS[from_state]:
        raise IllegalTransition(f"job {job.pk}: {from_state} → {to} is not an allowed transition")
    now = timezone.now()
    if connection.vendor != "postgresql":  # `make run`'s SQLite: lock, look, move
        locked = locks.job_if_present(job.pk)
        if locked is None or locked.state != from_state:
            return False
        job.state, job.cancel_requested_at = locked.state, locked.cancel_requested_at
        transition_many([job], to, reason=reason, actor=actor, **fields)
        return True
    quote = connection.ops.quote_name
    values = {"state": str(to), "state_reason": reason, "updated_at": now, **fields}
    assignments = ", ".join(f"{quote(Job._meta.get_field(name).column)} = %s" for name in values)
    events_sql, events_params = events.moved_from_sql("moved", from_state, to, reason=reason, actor=actor)
    table, pk, state = quote(Job._meta.db_table), quote(Job._meta.pk.column), quote(Job._meta.get_field("state").column)
    cancelled_at = quote(Job._meta.get_field("cancel_requested_at").column)
    sql = (f"WITH moved AS (UPDATE {table} SET {assignments} WHERE {pk} = %s AND {state} = %s "  # noqa: S608
           f"RETURNING {pk} AS id, {cancelled_at}), events AS ({events_sql}) SELECT {cancelled_at} FROM moved")
    with connection.cursor() as cursor:
        # Identifiers come from the model's own meta; every value is a bound parameter.
        cursor.execute(sql, [_plain(value) for value in values.values()] + [job.pk, str(from_state)] + events_params)
        row = cursor.fetchone()
    if row is None:
        return False
    job.state, job.state_reason, job.updated_at, job.cancel_requested_at = to, reason, now, row[0]
    for name, value in fields.items():
        setattr(job, name, value)
    return True


def transition_each_if(moves: Sequence[Move], from_state: str) -> list[Move]:
    """`transition_if` for many jobs the caller has not locked, each to its own state with its own reason and
    fields (the same field names for all): those still in `from_state` move, with their events, in one statement on
    PostgreSQL (the UPDATE's WHERE locks each row and checks its newest version). Returns the moves made, each job's
    `cancel_requested_at` refreshed from its row. Moves that end nothing only."""
    if not moves:
        return []
    if any(move.to in FINAL_STATES for move in moves):
        raise ValueError("endings go through transition(), one job at a time")
    for move in moves:
        if move.to not in ALLOWED_TRANSITIONS[from_state]:
            raise IllegalTransition(f"job {move.job.pk}: {from_state} → {move.to} is not an allowed transition")
    if connection.vendor != "postgresql":  # `make run`'s SQLite: one compare-and-swap each
        return [move for move in moves
                if transition_if(move.job, from_state, move.to, reason=move.reason, **move.fields)]
    now = timezone.now()
    names = ["state", "state_reason", "updated_at", *moves[0].fields]
    fields = [Job._meta.pk] + [Job._meta.get_field(name) for name in names]
    types = [Job._meta.pk.rel_db_type(connection)] + [field.db_type(connection) for field in fields[1:]]
    rows = [[move.job.pk, str(move.to), move.reason, now, *(_plain(move.fields[name]) for name in names[3:])]
            for move in moves]
    quote, table = connection.ops.quote_name, connection.ops.quote_name(Job._meta.db_table)
    column = {name: quote(Job._meta.get_field(name).column) for name in ("state", "state_reason", "cancel_requested_at")}
    pk = quote(Job._meta.pk.column)
    columns = ", ".join(quote(field.column) for field in fields)
    arrays = ", ".join(f"%s::{db_type}[]" for db_type in types)
    assignments = ", ".join(f"{quote(field.column)} = v.{quote(field.column)}" for field in fields[1:])
    events_sql, events_params = events.moved_each_from_sql("moved", from_state, at=now)
    sql = (  # Identifiers come from the models' own meta; every value is a bound parameter.
        f"WITH v AS (SELECT * FROM unnest({arrays}) AS v({columns})), "  # noqa: S608
        f"moved AS (UPDATE {table} SET {assignments} FROM v WHERE {table}.{pk} = v.{pk} AND {table}.{column['state']} = %s "
        f"RETURNING {table}.{pk} AS id, {table}.{column['cancel_requested_at']} AS cancelled, v.{column['state']} AS to_state, "
        f"v.{column['state_reason']} AS reason), "
        f"events AS ({events_sql}) SELECT id, cancelled FROM moved")
    with connection.cursor() as cursor:
        cursor.execute(sql, [list(values) for values in zip(*rows, strict=True)] + [str(from_state)] + events_params)
        moved = dict(cursor.fetchall())
    made = []
    for move in moves:
        if move.job.pk in moved:
            job = move.job
            job.state, job.state_reason, job.updated_at = move.to, move.reason, now
            job.cancel_requested_at = moved[job.pk]
            for name, value in move.fields.items():
                setattr(job, name, value)
            made.append(move)
    return made


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


def record_metrics(job: Job, metrics: dict) -> None:
    """The numbers a job reported (portal/jobs/metrics.py), set on it and saved: no state, no event, no
    `updated_at` (a job's bookkeeping, as `mark_seen`)."""
    job.metrics = metrics
    Job.objects.filter(pk=job.pk).update(metrics=metrics)


def record_outputs_not_collected(job: Job, notes: list[str]) -> None:
    """What of the job's outputs/ did not come back, and why (portal/jobs/outputs.py): bookkeeping, as
    `record_metrics`."""
    job.outputs_not_collected = notes
    Job.objects.filter(pk=job.pk).update(outputs_not_collected=notes)


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
