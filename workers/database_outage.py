"""Tasks wait out a database outage instead of failing (issue 16: "PostgreSQL unreachable for a while ... workers
retry").

A task that cannot reach PostgreSQL has done nothing it could record, and its message would be acknowledged as
failed: the job would wait for the stale-job sweep, which itself needs the database. So a task that carries work
(`retry_while_database_away = True` in its decorator) is sent again with a growing delay (1 s, 2 s, 4 s, ... at
most KAKEHASHI_DATABASE_RETRY_MAX_SECONDS) until the database answers. Periodic tasks do not: beat sends them
again anyway, and retries of each tick would pile up during a long outage: they skip the tick with one line in
the log. Retrying is safe because every such task
is idempotent on its ids (a dispatch is leased and found by name after a lost reply: docs/decisions/0002).
"""

from __future__ import annotations

import logging

from celery import Task

log = logging.getLogger(__name__)

# What psycopg says when the server is not there (refused, reset, closed, restarting), as opposed to an
# OperationalError of a working server (a deadlock, a statement timeout, SQLite's "database is locked").
_DATABASE_AWAY_MESSAGES = ("connection", "server closed", "could not connect", "the database system is")


class RetriesWhileTheDatabaseIsAway(Task):
    retry_while_database_away = False

    def __call__(self, *args: object, **kwargs: object) -> object:
        from django.db import InterfaceError, OperationalError, connections

        try:
            return super().__call__(*args, **kwargs)
        except (OperationalError, InterfaceError) as exc:
            if self.request.is_eager or self.request.called_directly:
                raise  # inline: the caller's transaction and its own error handling
            if isinstance(exc, OperationalError) and not _is_unreachable(exc):
                raise  # a deadlock or a statement timeout is not an outage: the task's own handling applies
            connections.close_all()  # a broken connection must not be the next attempt's
            if not self.retry_while_database_away:
                # A periodic sweep: its next tick comes anyway. One line a tick, not a traceback.
                log.warning("%s: skipped, the database is unreachable (%s)", self.name, _first_line(exc))
                return None
            retries = self.request.retries
            delay = min(2 ** min(retries, 10), _max_delay())
            log.warning("%s%s: the database is unreachable (%s); trying again in %s s",
                        self.name, list(args), _first_line(exc), delay)
            raise self.retry(exc=exc, countdown=delay, max_retries=None) from None


def _is_unreachable(exc: Exception) -> bool:
    text = str(exc).lower()
    return any(part in text for part in _DATABASE_AWAY_MESSAGES)


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _max_delay() -> int:
    from django.conf import settings

    return settings.KAKEHASHI_DATABASE_RETRY_MAX_SECONDS
