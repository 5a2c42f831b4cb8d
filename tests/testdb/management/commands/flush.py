"""The suite's `flush`: what TransactionTestCase (pytest-django's `transaction=True`, `live_server`) runs after each
test to empty the database, made cheap enough to run hundreds of times.

Django's own flush TRUNCATEs all ~110 tables of the schema in one statement, then re-creates the ~330 content types
and permissions the migrations made (post_migrate): about 0.85 s a test on this kind of machine, most of it PostgreSQL
giving each truncated table a new file. This one empties only the tables that hold a row (DELETE), and keeps the content
types and permissions (nothing in the suite writes them, and their ids then stay those of the migrations), so there
is nothing to re-create. Anything else, or another database engine, gets Django's flush.
"""

from __future__ import annotations

from django.core.management.commands import flush
from django.db import OperationalError, ProgrammingError, connections, transaction

KEPT = {"django_content_type", "auth_permission", "django_migrations"}
ATTEMPTS = 5
DEADLOCK = "40P01"  # PostgreSQL's SQLSTATE for deadlock_detected


class Command(flush.Command):
    def handle(self, **options):
        connection = connections[options["database"]]
        if connection.vendor != "postgresql" or options.get("interactive") or options.get("reset_sequences", True):
            return super().handle(**options)
        for attempt in range(ATTEMPTS):
            try:
                return self._delete_written(connection, options["database"])
            except ProgrammingError:  # the role needs a superuser (the suite's own PostgreSQL has one)
                return super().handle(**options)
            except OperationalError as exc:
                # A deadlock with a process still writing after the test (a live Celery worker finishing a dispatch):
                # PostgreSQL rolled this transaction back, so nothing was deleted; that process goes on, and the
                # next attempt looks again at which tables hold rows. Left full, the database would fail every later
                # test of this xdist worker (a second "alice"). Any other failure is reported as it is.
                if getattr(exc.__cause__, "sqlstate", None) != DEADLOCK or attempt == ATTEMPTS - 1:
                    raise

    @staticmethod
    def _delete_written(connection, database: str) -> None:
        quote = connection.ops.quote_name
        tables = sorted(set(connection.introspection.django_table_names(only_existing=True, include_views=False))
                        - KEPT)
        with connection.cursor() as cursor:
            cursor.execute(" UNION ALL ".join(
                f"SELECT %s WHERE EXISTS (SELECT 1 FROM {quote(table)})" for table in tables), tables)
            written = [row[0] for row in cursor.fetchall()]
            if written:
                # DELETE, not TRUNCATE: a few rows go at once, without a new file per table. The rows go in any
                # order, foreign keys unchecked (replica role: constraint triggers off), because every table that
                # holds a row is emptied in this one transaction, so none is left referring to a deleted row.
                with transaction.atomic(using=database):
                    cursor.execute("SET LOCAL session_replication_role = replica")
                    for table in written:
                        cursor.execute(f"DELETE FROM {quote(table)}")
