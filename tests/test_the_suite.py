"""The suite's own machinery (tests/conftest.py, tests/testdb): what keeps it fast must not quietly stop working."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections import Counter

import pytest
from django.core.management import call_command

from tests.conftest import ROOT


@pytest.mark.django_db(transaction=True)
def test_the_suites_flush_empties_every_table_a_test_wrote_and_keeps_the_content_types_and_permissions():
    from django.contrib.auth.models import Permission
    from django.contrib.contenttypes.models import ContentType

    from portal.projects.models import Membership, Project, Role

    kinds, permissions = ContentType.objects.count(), set(Permission.objects.values_list("pk", flat=True))
    user = _user("flushed")
    project = Project.objects.create(slug="flushed", name="Flushed")
    Membership.objects.create(user=user, project=project, role=Role.OWNER)  # rows that refer to other rows

    call_command("flush", verbosity=0, interactive=False, reset_sequences=False, allow_cascade=False,
                 inhibit_post_migrate=False)  # as TransactionTestCase calls it

    assert not Membership.objects.exists() and not Project.objects.exists()
    assert not type(user).objects.exists()
    assert ContentType.objects.count() == kinds
    assert set(Permission.objects.values_list("pk", flat=True)) == permissions


@pytest.mark.django_db(transaction=True)
def test_the_suites_flush_empties_the_tables_even_when_postgresql_makes_it_a_deadlocks_victim():
    """What a live Celery worker still dispatching after its test did to a teardown once: its transaction and the flush's
    DELETEs locked the same rows in opposite orders, PostgreSQL rolled the flush back, the rows stayed, and every later
    test of that xdist worker failed on a second "alice" (37 errors). Here another connection takes the two locks in
    the order that deadlocks with the flush, and leaves the flush to find the deadlock first."""
    import threading
    import time

    import psycopg
    from django.db import connection

    from portal.projects.models import Project

    user = _user("deadlocked")
    project = Project.objects.create(slug="deadlocked", name="Deadlocked")
    db = connection.settings_dict
    other = psycopg.connect(host=db["HOST"], port=db["PORT"] or 5432, dbname=db["NAME"], user=db["USER"])
    other.execute("SET deadlock_timeout = '60s'")  # the flush's backend checks first (1 s): the flush is the victim
    other.execute("UPDATE projects_project SET name = 'held' WHERE id = %s", [project.pk])
    failed: list[Exception] = []

    def flush() -> None:
        try:
            call_command("flush", verbosity=0, interactive=False, reset_sequences=False, allow_cascade=False,
                         inhibit_post_migrate=False)
        except Exception as exc:  # noqa: BLE001 - the test reports it
            failed.append(exc)
        finally:
            connection.close()

    flushing = threading.Thread(target=flush)
    flushing.start()
    deadline = time.monotonic() + 30
    while not _waiting_for_a_lock():  # the flush waits for the project's row
        assert time.monotonic() < deadline, "the flush never waited for the project's row"
        time.sleep(0.05)
    other.execute("UPDATE auth_user SET first_name = 'held' WHERE id = %s", [user.pk])  # the user row the flush holds
    other.commit()
    other.close()
    flushing.join(60)

    assert not failed, failed
    assert not Project.objects.exists() and not type(user).objects.exists()


def _waiting_for_a_lock() -> int:
    """Backends of the test database waiting for a lock, seen from this thread's connection (in autocommit: a
    transaction would keep seeing its first snapshot of pg_stat_activity)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                       "AND wait_event_type = 'Lock'")
        return cursor.fetchone()[0]


def _user(name: str):
    from django.contrib.auth import get_user_model

    return get_user_model().objects.create_user(name, password="x")


@pytest.mark.long
def test_tests_that_share_a_module_fixture_or_stop_the_live_worker_run_on_one_xdist_worker(tmp_path):
    probe = ROOT / "tests" / f"test_zz_probe_{os.getpid()}.py"
    other = ROOT / "tests" / f"test_zz_probe_stops_{os.getpid()}.py"
    probe.write_text(textwrap.dedent('''
        import os
        import pytest

        @pytest.fixture(scope="module")
        def stack():
            return "built once"

        @pytest.mark.parametrize("i", range(4))
        def test_shares_the_stack(stack, i):
            print("WORKER", os.environ["PYTEST_XDIST_WORKER"], "shares")

        @pytest.mark.parametrize("i", range(4))
        def test_alone(i):
            pass

        @pytest.mark.parametrize("i", range(3))
        def test_stops_the_live_worker(no_live_worker, i):
            print("WORKER", os.environ["PYTEST_XDIST_WORKER"], "stops")
    '''))
    other.write_text(textwrap.dedent('''
        import os
        import pytest

        @pytest.mark.parametrize("i", range(3))
        def test_stops_it_too(no_live_worker, i):
            print("WORKER", os.environ["PYTEST_XDIST_WORKER"], "stops")
    '''))
    # A run of its own: with this run's variables it would take this run's database for its own, and drop it.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "KAKEHASHI_", "CELERY_", "CACHE_"))}
    try:
        done = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-p", "no:cacheprovider",
                               "-rP", "-q", str(probe.relative_to(ROOT)), str(other.relative_to(ROOT))], cwd=ROOT,
                              env=env, capture_output=True, text=True, timeout=240)
    finally:
        probe.unlink()
        other.unlink()
    assert done.returncode == 0, done.stdout[-3000:]
    lines = [line.split() for line in done.stdout.splitlines() if line.startswith("WORKER")]
    shares = {worker for _, worker, what in lines if what == "shares"}
    stops = {worker for _, worker, what in lines if what == "stops"}
    assert len(lines) == 10 and len(shares) == 1 and len(stops) == 1, done.stdout[-3000:]


@pytest.mark.long
def test_the_live_workers_beat_sends_nothing_between_the_tests_that_hold_it_and_sweeps_again_in_the_next():
    """The beat of the shared live worker is stopped once a test that holds `live_worker` ends (about 30 CPU-s a run
    of sweeps nobody waits for) and continued when the next such test begins."""
    probe = ROOT / "tests" / f"test_zz_probe_beat_{os.getpid()}.py"
    probe.write_text(textwrap.dedent('''
        import time
        from pathlib import Path

        import pytest
        from django.conf import settings

        from tests import conftest

        pytestmark = pytest.mark.django_db(transaction=True)

        def _state():
            return Path(f"/proc/{conftest._LIVE_WORKER['beat'].pid}/stat").read_text().rsplit(")", 1)[1].split()[0]

        def _sweeps():
            return (Path(settings.VAR_DIR) / "worker.log").read_text().count("track_all_clusters_task")

        def test_1_holds_it(live_worker):
            assert _state() in "SR"
            time.sleep(2)
            print("BEAT", "held", _sweeps() > 0)

        def test_2_does_not():
            before = _sweeps()
            time.sleep(4)
            print("BEAT", "between", _state(), _sweeps() - before)

        def test_3_holds_it_again(live_worker):
            before = _sweeps()
            time.sleep(3)
            print("BEAT", "again", _sweeps() > before)
    '''))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "KAKEHASHI_", "CELERY_", "CACHE_"))}
    try:
        done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rP", "-q",
                               str(probe.relative_to(ROOT))], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=240)
    finally:
        probe.unlink()
    assert done.returncode == 0, done.stdout[-3000:]
    said = [line.split()[1:] for line in done.stdout.splitlines() if line.startswith("BEAT")]
    assert said == [["held", "True"], ["between", "T", "0"], ["again", "True"]], done.stdout[-3000:]


def test_every_collected_test_has_an_id_of_its_own(request):
    """xdist schedules tests by id: two tests with one id are one test to it, and the second never runs (49 of the 50
    schemathesis operation tests, until tests/conftest.py's _IdsForPytest9). This sees the whole run's collection."""
    ids = [item.nodeid for item in request.session.items]
    shared = [nodeid for nodeid, count in Counter(ids).items() if count > 1]
    assert not shared, sorted(shared)[:5]
    operations = [nodeid for nodeid in ids if nodeid.startswith("tests/api/test_schemathesis.py::")]
    assert all("[" in nodeid for nodeid in operations), operations[:3]


def test_with_kakehashi_test_cpu_set_each_test_writes_the_cpu_it_spent_beside_its_id(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from tests.conftest import _CPUPerTest

    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw7")
    plugin = _CPUPerTest(str(tmp_path / "cpu"))
    for nodeid, loops in (("tests/a.py::test_idle", 0), ("tests/a.py::test_busy", 3_000_000)):
        protocol = plugin.pytest_runtest_protocol(SimpleNamespace(nodeid=nodeid), None)
        next(protocol)  # the test runs here
        sum(range(loops))
        with pytest.raises(StopIteration):
            next(protocol)
    lines = [line.split("\t") for line in (tmp_path / "cpu.gw7").read_text().splitlines()]
    assert [nodeid for _, nodeid, _, _ in lines] == ["tests/a.py::test_idle", "tests/a.py::test_busy"]
    assert float(lines[1][0]) > float(lines[0][0]) and float(lines[1][0]) > 0.01
    (idle_start, idle_end), (busy_start, busy_end) = [(float(start), float(end)) for _, _, start, end in lines]
    assert idle_start <= idle_end <= busy_start <= busy_end and abs(busy_end - time.time()) < 60


def test_under_xdist_the_tests_marked_long_are_taken_first_so_the_run_never_ends_waiting_for_one(request):
    """A run ends when its last test does: a long test taken last (the every-form walk, 85 s) ran alone while the
    other workers had finished. xdist takes the groups first, then the other tests in collection order."""
    if not hasattr(request.config, "workerinput"):
        pytest.skip("one process: no worker is left waiting for another")
    items = request.session.items
    marked = [index for index, item in enumerate(items) if item.get_closest_marker("long")]
    assert marked == list(range(len(marked))), [items[i].nodeid for i in marked if i >= len(marked)][:3]
