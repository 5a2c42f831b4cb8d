"""The one writer of a Job's lifecycle: four verbs, each batch-first (one job is a batch of one).

- `record_new(jobs, event)`: new jobs, queued, with their first event (and an audit row each).
- `apply(moves)`: jobs moved, each to its own state with its own event (portal/jobs/events.py). On rows the
  caller locked (portal/jobs/locks.py); with `expect=STATE` a compare-and-swap on rows it did not lock. A job that
  ends has its cost settled (its budget row locked after the job's, as the lock order says), its people told
  (portal/jobs/notices.py) and its output fetched by a worker once the transaction commits.
- `note(jobs, event)`: something that happened without a state change (a cancel asked for, data staged).
- `update(jobs, **fields)`: bookkeeping that needs no event (a dispatch lease, last seen, metrics).

Everything runs in the caller's transaction. How rows reach the database is one private writer, chosen once
(`_writer`): on PostgreSQL each verb is one statement however many jobs (arrays unnested, the events inserted
from what the UPDATE returns: docs/decisions/0024); on `make run`'s SQLite the portable ORM way, same rows.

Why one module: it is the only code that writes a job's state, and its two writers must leave the same rows
(tests/jobs/test_transitions_writers.py); kept side by side, a change to one verb shows in both.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from enum import Enum
from typing import Any, Protocol
from uuid import UUID

from django.db import connection
from django.utils import timezone
from psycopg.types.json import Jsonb

from portal import enqueue
from portal.audit.actions import record, record_each_sql
from portal.budgets import actions as budgets
from portal.catalog import job_templates
from portal.jobs import locks, notices
from portal.jobs.events import Event
from portal.jobs.models import ALLOWED_TRANSITIONS, FINAL_STATES, IllegalTransition, Job, JobEvent, JobState


@dataclass
class Move:
    """One job to `to`, for the reason `event` gives, setting `fields` with it."""

    job: Job
    to: str
    event: Event
    fields: dict[str, Any] = field(default_factory=dict)


# (job, from_state, to_state, event): one JobEvent row.
History = list[tuple[Job, str, str, Event]]


# ---------------------------------------------------------------------------------------------------- the verbs


def record_new(jobs: Sequence[Job], event: Event, *, audit: dict[str, Any] | None = None) -> None:
    """Save prepared jobs (queued) and their first event; with `audit` (record's arguments: action, project,
    data…), an audit row for each job too."""
    if jobs:
        _writer().insert(jobs, event, audit)


def apply(moves: Sequence[Move], *, expect: str | None = None) -> list[Move]:
    """Move jobs and write their events; returns the moves made.

    Without `expect` the caller holds the rows (portal/jobs/locks.py) and every move is made (one not in
    ALLOWED_TRANSITIONS raises IllegalTransition). With `expect`, a compare-and-swap on rows the caller has not
    locked: only the jobs still in `expect` move (each job's `cancel_requested_at` is refreshed from its row: a
    cancel asked for meanwhile); endings are not made this way, as their money is settled under the job's lock.
    """
    if not moves:
        return []
    if expect is not None:
        return _swap(moves, expect)
    now = timezone.now()
    changed = {"state", "state_reason", "updated_at"}
    history: History = []
    for move in moves:
        job = move.job
        job.check_transition(move.to)
        history.append((job, job.state, move.to, move.event))
        job.state, job.state_reason, job.updated_at = move.to, move.event.words, now
        for name, value in move.fields.items():
            setattr(job, name, value)
        changed.update(move.fields)
    endings = [move.job for move in moves if move.to in FINAL_STATES]
    conversions: dict = {}  # one lookup per pair of units, not one per ending
    costs = [(job, _actual_cost(job, conversions)) for job in endings]
    if any(actual is not None for _, actual in costs):
        changed.add("cost_amount")
    _writer().write([move.job for move in moves], sorted(changed), history)
    budgets.settle_many(costs)
    _after(history)
    return list(moves)


def note(jobs: Job | Sequence[Job], event: Event, **fields: Any) -> None:
    """Record on locked jobs something that changes no state (a cancel asked for, data staged), with the
    fields it sets."""
    jobs = [jobs] if isinstance(jobs, Job) else list(jobs)
    if not jobs:
        return
    names: list[str] = []
    if fields:
        now = timezone.now()
        for job in jobs:
            for name, value in fields.items():
                setattr(job, name, value)
            job.updated_at = now
        names = sorted({"updated_at", *fields})
    _writer().write(jobs, names, [(job, job.state, job.state, event) for job in jobs])


def update(jobs: Sequence[Job | int], *, where: dict[str, Any] | None = None, stamp: bool = True,
           **fields: Any) -> int:
    """Bookkeeping that changes no state and needs no event (a dispatch lease, why a submit will be retried, when
    the scheduler last saw a job, the metrics it reported), set on the given jobs (or job ids) in one UPDATE.
    `where` narrows it to the rows that still match (a compare-and-set: a reminder sent once); `stamp=False`
    leaves `updated_at` alone (what the recovery sweep reads as the last real change). Returns the rows updated."""
    if not jobs or not fields:
        return 0
    values = dict(fields)
    if stamp:
        values["updated_at"] = timezone.now()
    for job in jobs:
        if isinstance(job, Job):
            for name, value in values.items():
                setattr(job, name, value)
    ids = [job.pk if isinstance(job, Job) else job for job in jobs]
    return Job.objects.filter(pk__in=ids, **(where or {})).update(**values)


# ------------------------------------------------------------------------------------------ what follows a move


def _swap(moves: Sequence[Move], expect: str) -> list[Move]:
    if any(move.to in FINAL_STATES for move in moves):
        raise ValueError("endings are applied on locked rows (without expect=): their money is settled there")
    for move in moves:
        if move.to not in ALLOWED_TRANSITIONS[expect]:
            raise IllegalTransition(f"job {move.job.pk}: {expect} → {move.to} is not an allowed transition")
    now = timezone.now()
    moved = _writer().swap(moves, expect, now)
    made = []
    for move in moves:
        if move.job.pk in moved:
            job = move.job
            job.state, job.state_reason, job.updated_at = move.to, move.event.words, now
            job.cancel_requested_at = moved[job.pk]
            for name, value in move.fields.items():
                setattr(job, name, value)
            made.append(move)
    return made


def _after(history: History) -> None:
    """What follows moves, in their transaction: people told of endings and lost jobs (in bulk), the output of an
    ended job fetched after commit, a health check's figures recorded, an ended session's hub server removed."""
    notices.after_moves([(job, to, event) for job, _, to, event in history])
    for job, _, to, _ in history:
        if to in FINAL_STATES and job.scheduler_id:
            # Keep the final stdout/stderr in the portal: the cluster's copy may be purged later.
            enqueue.enqueue_on_commit(enqueue.FETCH_OUTPUT, job.pk)
            template = job_templates.get(job.template)
            if template is not None and template.records_health and to == JobState.COMPLETED:
                enqueue.enqueue_on_commit(enqueue.RECORD_HEALTH_CHECK, job.pk)
        if to in FINAL_STATES and job.kind == Job.Kind.SESSION:
            # The hub counts stopped named servers against its per-user limit: an ended session's is removed.
            enqueue.enqueue_on_commit(enqueue.FORGET_HUB_SERVER, job.pk)


def _actual_cost(job: Job, conversions: dict | None = None):
    """What an ended job costs, set on it (not saved); None where it has no rate."""
    if job.hardware is None or not job.estimate_unit:
        return None
    seconds = job.elapsed_seconds or 0
    job.cost_amount = budgets.cost(job.hardware.rate, job.hardware.rate_unit, job.nodes, seconds,
                                   job.estimate_unit, conversions).amount
    return job.cost_amount


# ----------------------------------------------------------------------------------------- the private writer


class _Writer(Protocol):
    def insert(self, jobs: Sequence[Job], event: Event, audit: dict[str, Any] | None) -> None:
        """New jobs, their first event (queued) and audit rows."""

    def write(self, jobs: Sequence[Job], names: Sequence[str], history: History) -> None:
        """Each (locked) job's own values of `names`, and the events of `history`."""

    def swap(self, moves: Sequence[Move], expect: str, now: datetime) -> dict[int, datetime | None]:
        """The moves of the jobs still in `expect`, with their events: {pk: its cancel_requested_at} of those moved."""


def _writer() -> _Writer:
    """The one place the database's kind is asked."""
    return _POSTGRES if connection.vendor == "postgresql" else _PORTABLE


def _plain(value: Any) -> Any:
    return value.value if isinstance(value, Enum) else value


def _json_value(value: Any) -> Any:
    """What JSON cannot carry as it is, as PostgreSQL reads it for the column: full ISO times (DjangoJSONEncoder
    would cut them to milliseconds), decimals and UUIDs as text."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Decimal | UUID):
        return str(value)
    if isinstance(value, Enum):
        return value.value
    raise TypeError(f"a job column holds a {type(value).__name__}, which the insert cannot carry as JSON")


def _row_json(rows: Any) -> str:
    return json.dumps(rows, default=_json_value)


def _actor_id(event: Event) -> int | None:
    return getattr(event.actor, "pk", None)


class _Portable:
    """The ORM's way, for `make run`'s SQLite (no unnest, no data-modifying CTEs): the same rows."""

    def insert(self, jobs, event, audit) -> None:
        Job.objects.bulk_create(jobs)
        now = timezone.now()
        JobEvent.objects.bulk_create([_event_row(job, "", JobState.QUEUED, event, now) for job in jobs])
        if audit is not None:
            for job in jobs:
                record(audit["action"], actor=event.actor, project=audit.get("project"), target=job,
                       **audit.get("data", {}))

    def write(self, jobs, names, history) -> None:
        if names:
            Job.objects.bulk_update(jobs, list(names))
        now = timezone.now()
        JobEvent.objects.bulk_create([_event_row(job, from_, to, event, now) for job, from_, to, event in history])

    def swap(self, moves, expect, now) -> dict[int, datetime | None]:
        moved: dict[int, datetime | None] = {}
        names = sorted({"state", "state_reason", "updated_at", *(name for m in moves for name in m.fields)})
        for move in moves:  # lock, look, move (SQLite serialises writers: the lock is the transaction's)
            row = locks.job_if_present(move.job.pk)
            if row is None or row.state != expect:
                continue
            row.state, row.state_reason, row.updated_at = move.to, move.event.words, now
            for name, value in move.fields.items():
                setattr(row, name, value)
            self.write([row], names, [(row, expect, move.to, move.event)])
            moved[row.pk] = row.cancel_requested_at
        return moved


def _event_row(job: Job, from_state: str, to: str, event: Event, at: datetime) -> JobEvent:
    return JobEvent(job_id=job.pk, from_state=str(from_state), to_state=str(to), at=at, cause=str(event.cause),
                    reason=event.words, data=dict(event.data), actor_id=_actor_id(event))


class _Postgres:
    """One statement per verb, whatever the number of jobs: arrays unnested, events inserted beside the UPDATE."""

    _EVENT_COLUMNS = ("job", "from_state", "to_state", "at", "cause", "reason", "data", "actor")
    _job_insert_made: tuple[str, list] | None = None

    def _quote(self, name: str) -> str:
        return connection.ops.quote_name(name)

    def _event_columns(self) -> str:
        return ", ".join(self._quote(JobEvent._meta.get_field(name).column) for name in self._EVENT_COLUMNS)

    def _data(self, event: Event):
        return JobEvent._meta.get_field("data").get_db_prep_save(dict(event.data), connection)

    def insert(self, jobs, event, audit) -> None:
        insert, params = self._insert_jobs(jobs)
        parts = [f"new_jobs AS ({insert} RETURNING id, uuid)"]
        # Identifiers come from the models' meta; every value is a bound parameter.
        parts.append(f"first_events AS (INSERT INTO {self._quote(JobEvent._meta.db_table)} "  # noqa: S608
                     f"({self._event_columns()}) SELECT new_jobs.id, '', %s, %s, %s, %s, %s, %s FROM new_jobs)")
        params += [str(JobState.QUEUED), timezone.now(), str(event.cause), event.words, self._data(event),
                   _actor_id(event)]
        if audit is not None:
            audit_sql, audit_params = record_each_sql(audit["action"], source="new_jobs", target=Job,
                                                      actor=event.actor, project=audit.get("project"),
                                                      **audit.get("data", {}))
            parts.append(f"audit AS ({audit_sql})")
            params += audit_params
        with connection.cursor() as cursor:
            cursor.execute(f"WITH {', '.join(parts)} SELECT id, uuid FROM new_jobs", params)  # noqa: S608
            ids = {uuid: pk for pk, uuid in cursor.fetchall()}
        for job in jobs:
            job.pk = ids[job.uuid]
            job._state.adding, job._state.db = False, connection.alias

    def _insert_jobs(self, jobs) -> tuple[str, list]:
        """INSERT INTO job (every column but id) SELECT them FROM jsonb_populate_recordset(the rows as one JSON
        array), and its one parameter.

        One parameter, not one array per column: a driver that binds on the client quotes every parameter in Python,
        and ~50 arrays cost a submit request more CPU than the JSON (issue 28, goal 4a). PostgreSQL parses each
        value as the column's type, as it parses an array's: times in ISO 8601 with their offset, decimals as text,
        JSON columns as they are, JSON null as SQL NULL (a JSONField's None)."""
        now = timezone.now()
        sql, columns = self._job_insert()
        rows = []
        for job in jobs:
            row = {}
            for column, stamped in columns:
                if stamped:
                    setattr(job, column.attname, now)
                row[column.column] = getattr(job, column.attname)
            rows.append(row)
        return sql, [Jsonb(rows, dumps=_row_json)]

    def _job_insert(self) -> tuple[str, list[tuple[Any, bool]]]:
        """The INSERT's SQL and its columns (field, set to now), made once per process: reading the model's meta for
        each of its ~50 columns was a twentieth of a submit request's CPU (issue 28, goal 4a)."""
        if self._job_insert_made is None:
            columns = [(column, bool(getattr(column, "auto_now", False) or getattr(column, "auto_now_add", False)))
                       for column in Job._meta.concrete_fields if not column.primary_key]
            names = ", ".join(self._quote(column.column) for column, _ in columns)
            table = self._quote(Job._meta.db_table)
            # Identifiers come from the model's own meta; every value is in the bound parameter.
            sql = f"INSERT INTO {table} ({names}) SELECT {names} FROM jsonb_populate_recordset(NULL::{table}, %s)"  # noqa: S608
            self._job_insert_made = (sql, columns)
        return self._job_insert_made

    def _type(self, name: str) -> str:
        return JobEvent._meta.get_field(name).db_type(connection)

    def _events_sql(self, history: History) -> tuple[str, list]:
        now = timezone.now()
        values = {
            "job": [job.pk for job, *_ in history],
            "from_state": [str(from_) for _, from_, _, _ in history],
            "to_state": [str(to) for _, _, to, _ in history],
            "at": [now] * len(history),
            "cause": [str(event.cause) for *_, event in history],
            "reason": [event.words for *_, event in history],
            "data": [self._data(event) for *_, event in history],
            "actor": [_actor_id(event) for *_, event in history],
        }
        arrays = [(self._type(name), values[name]) for name in self._EVENT_COLUMNS]
        unnest = ", ".join(f"%s::{db_type}[]" for db_type, _ in arrays)
        # Identifiers come from the model's own meta; every value is a bound parameter.
        return (f"INSERT INTO {self._quote(JobEvent._meta.db_table)} ({self._event_columns()}) "  # noqa: S608
                f"SELECT * FROM unnest({unnest})", [values for _, values in arrays])

    def write(self, jobs, names, history) -> None:
        events_sql, events_params = self._events_sql(history) if history else ("", [])
        if not names:
            with connection.cursor() as cursor:
                cursor.execute(events_sql, events_params)
            return
        fields = [Job._meta.pk] + [Job._meta.get_field(name) for name in names]
        table = self._quote(Job._meta.db_table)
        types = [Job._meta.pk.rel_db_type(connection)] + [f.db_type(connection) for f in fields[1:]]
        columns = ", ".join(self._quote(f.column) for f in fields)
        arrays = ", ".join(f"%s::{db_type}[]" for db_type in types)
        assignments = ", ".join(f"{self._quote(f.column)} = v.{self._quote(f.column)}" for f in fields[1:])
        pk = self._quote(fields[0].column)
        # The values as Python has them (psycopg adapts datetimes, decimals, None); a state is an enum: its value.
        values = [[_plain(getattr(job, f.attname)) for job in jobs] for f in fields]
        # Identifiers come from the model's own meta; every value is a bound parameter.
        update = (f"UPDATE {table} SET {assignments} FROM unnest({arrays}) AS v({columns}) "  # noqa: S608
                  f"WHERE {table}.{pk} = v.{pk}")
        with connection.cursor() as cursor:
            if history:
                cursor.execute(f"WITH moved AS ({update}) {events_sql}", values + events_params)
            else:
                cursor.execute(update, values)

    def swap(self, moves, expect, now) -> dict[int, datetime | None]:
        names = ["state", "state_reason", "updated_at", *moves[0].fields]
        fields = [Job._meta.pk] + [Job._meta.get_field(name) for name in names]
        types = [Job._meta.pk.rel_db_type(connection)] + [f.db_type(connection) for f in fields[1:]]
        rows = [[move.job.pk, str(move.to), move.event.words, now, *(_plain(move.fields[n]) for n in names[3:])]
                for move in moves]
        quote, table = self._quote, self._quote(Job._meta.db_table)
        column = {name: quote(Job._meta.get_field(name).column) for name in ("state", "state_reason", "cancel_requested_at")}
        pk = quote(Job._meta.pk.column)
        columns = ", ".join(quote(f.column) for f in fields)
        # Each move's event travels beside its values, under names no job column has.
        arrays = ", ".join([f"%s::{db_type}[]" for db_type in types]
                           + [f"%s::{self._type(name)}[]" for name in ("cause", "data", "actor")])
        assignments = ", ".join(f"{quote(f.column)} = v.{quote(f.column)}" for f in fields[1:])
        sql = (  # Identifiers come from the models' own meta; every value is a bound parameter.
            f"WITH v AS (SELECT * FROM unnest({arrays}) AS v({columns}, event_cause, event_data, event_actor)), "  # noqa: S608
            f"moved AS (UPDATE {table} SET {assignments} FROM v WHERE {table}.{pk} = v.{pk} "
            f"AND {table}.{column['state']} = %s RETURNING {table}.{pk} AS id, "
            f"{table}.{column['cancel_requested_at']} AS cancelled, v.{column['state']} AS to_state, "
            f"v.{column['state_reason']} AS reason, v.event_cause, v.event_data, v.event_actor), "
            f"events AS (INSERT INTO {quote(JobEvent._meta.db_table)} ({self._event_columns()}) "
            f"SELECT id, %s::varchar, to_state, %s::timestamptz, event_cause, reason, event_data, event_actor "
            f"FROM moved) SELECT id, cancelled FROM moved")
        params = [list(values) for values in zip(*rows, strict=True)]
        params += [[str(m.event.cause) for m in moves], [self._data(m.event) for m in moves],
                   [_actor_id(m.event) for m in moves], str(expect), str(expect), now]
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return dict(cursor.fetchall())


_POSTGRES, _PORTABLE = _Postgres(), _Portable()
