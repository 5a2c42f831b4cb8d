"""What the database benchmarks share: a throw-away test database around a run, and which SQL counts as a
statement (transaction brackets do not)."""

from __future__ import annotations

from collections.abc import Callable

_BRACKETS = ("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE SAVEPOINT")


def is_statement(sql: str) -> bool:
    return not sql.lstrip().upper().startswith(_BRACKETS)


class StatementCounter:
    """A database execute wrapper counting every statement sent, however many (transaction brackets excepted):
    Django keeps only the last 9,000 captured queries."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, execute, sql, params, many, context):
        if is_statement(sql):
            self.count += 1
        return execute(sql, params, many, context)


def in_test_database(run: Callable[[], int]) -> int:
    """Set Django up, run `run` against a fresh test database (as the tests would), drop it afterwards."""
    import django

    django.setup()
    from django.db import connection
    from django.test.utils import setup_test_environment

    setup_test_environment()
    db_name = connection.creation.create_test_db(verbosity=0, autoclobber=True)
    try:
        return run()
    finally:
        connection.creation.destroy_test_db(db_name, verbosity=0)
