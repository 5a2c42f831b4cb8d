"""What the database benchmarks share: a throw-away test database around a run, and which SQL counts as a
statement (transaction brackets do not)."""

from __future__ import annotations

from collections.abc import Callable

_BRACKETS = ("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE SAVEPOINT")


def is_statement(sql: str) -> bool:
    return not sql.lstrip().upper().startswith(_BRACKETS)


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
