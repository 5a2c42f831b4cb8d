"""The one writer of JobEvent rows: a job's history, as its page shows it (Saleor's `order/events.py` shape).

Every event says when, why and (when a person did it) who. State changes are written by `transitions`; what
changes no state (a cancel asked for, a stuck queue entry deleted) is a note here too, so the history is whole.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from django.db import connection
from django.utils import timezone

from portal.jobs.models import Job, JobEvent, JobState

MAX_REASON = 2000


def submitted(jobs: Sequence[Job], *, reason: str, actor=None) -> None:
    """The first event of newly recorded jobs: they are queued."""
    moved_each([(job, "", JobState.QUEUED, reason) for job in jobs], actor=actor)


def moved(moves: Iterable[tuple[Job, str]], to: str, *, reason: str, actor=None) -> None:
    """Jobs moved from the state given with each of them to `to`."""
    JobEvent.objects.bulk_create(
        JobEvent(job=job, from_state=from_state, to_state=to, reason=reason, actor=actor) for job, from_state in moves
    )


def noted(job: Job, reason: str, *, actor=None) -> None:
    """Something that happened to a job without changing its state."""
    JobEvent.objects.create(job=job, from_state=job.state, to_state=job.state, reason=reason[:MAX_REASON], actor=actor)


def moved_each(history: Sequence[tuple[Job, str, str, str]], *, actor=None) -> None:
    """Jobs moved each from its own state to its own state for its own reason: (job, from, to, reason).

    One INSERT … SELECT FROM unnest(one array per column): bulk_create builds a model and a row of parameters
    per event, most of a 10,000-job tracking cycle's CPU.
    """
    if not history:
        return
    if connection.vendor != "postgresql":  # `make run`'s SQLite has no unnest: the portable way, same rows
        now = timezone.now()
        JobEvent.objects.bulk_create([
            JobEvent(job_id=job.pk, from_state=str(from_state), to_state=str(to), at=now, reason=reason[:MAX_REASON],
                     actor_id=getattr(actor, "pk", None))
            for job, from_state, to, reason in history])
        return
    sql, params = moved_each_sql(history, actor=actor)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


def moved_each_sql(history: Sequence[tuple[Job, str, str, str]], *, actor=None) -> tuple[str, list]:
    """moved_each's INSERT (PostgreSQL), for a writer that sends it with the move itself in one statement."""
    now = timezone.now()
    values = {"job": [job.pk for job, *_ in history],
              # A state is a TextChoices member: its value, as str() gives it.
              "from_state": [str(from_state) for _, from_state, _, _ in history],
              "to_state": [str(to) for _, _, to, _ in history],
              "at": [now] * len(history),
              "reason": [reason[:MAX_REASON] for *_, reason in history],
              "actor": [getattr(actor, "pk", None)] * len(history)}
    fields = [JobEvent._meta.get_field(name) for name in values]
    columns = [(field.column, field.db_type(connection), values[field.name]) for field in fields]
    quote = connection.ops.quote_name
    names = ", ".join(quote(name) for name, _, _ in columns)
    arrays = ", ".join(f"%s::{db_type}[]" for _, db_type, _ in columns)
    # Identifiers are fixed here; every value is a bound parameter.
    return (f"INSERT INTO {quote(JobEvent._meta.db_table)} ({names}) SELECT * FROM unnest({arrays})",  # noqa: S608
            [values for _, _, values in columns])


def moved_from_sql(source: str, from_state: str, to: str, *, reason: str, actor=None) -> tuple[str, list]:
    """The event of each job a data-modifying CTE named `source` returns (its `id`), moved from `from_state` to
    `to` (PostgreSQL): for a writer that moves jobs and writes their events in one statement (a submit's first
    events, a compare-and-swap's move)."""
    quote = connection.ops.quote_name
    names = ", ".join(quote(JobEvent._meta.get_field(name).column)
                      for name in ("job", "from_state", "to_state", "at", "reason", "actor"))
    # `source` is the caller's CTE; identifiers are the model's; every value is a bound parameter.
    sql = (f"INSERT INTO {quote(JobEvent._meta.db_table)} ({names}) "  # noqa: S608
           f"SELECT {source}.id, %s, %s, %s, %s, %s FROM {source}")
    return sql, [str(from_state), str(to), timezone.now(), reason[:MAX_REASON], getattr(actor, "pk", None)]


def moved_each_from_sql(source: str, from_state: str, *, at) -> tuple[str, list]:
    """The event of each job a data-modifying CTE named `source` returns (`id`, `to_state`, `reason`: each to its
    own state for its own reason), moved from `from_state` at `at`, by no one (PostgreSQL): for a writer that moves
    jobs and writes their events in one statement (a compare-and-swap of many jobs, transitions.transition_each_if)."""
    quote = connection.ops.quote_name
    names = ", ".join(quote(JobEvent._meta.get_field(name).column)
                      for name in ("job", "from_state", "to_state", "at", "reason", "actor"))
    # `source` is the caller's CTE; identifiers are the model's; every value is a bound parameter.
    sql = (f"INSERT INTO {quote(JobEvent._meta.db_table)} ({names}) "  # noqa: S608
           f"SELECT {source}.id, %s::varchar, {source}.to_state, %s::timestamptz, "
           f"left({source}.reason, {MAX_REASON}), NULL FROM {source}")
    return sql, [str(from_state), at]
