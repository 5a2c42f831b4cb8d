"""Shared fixtures: a live Celery worker over the real Redis, and small builders for portal objects."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from backends.transport import SSHTransport

ROOT = Path(__file__).resolve().parent.parent
CLUSTER_DIR = Path(os.environ.get("KAKEHASHI_CLUSTER_DIR", "/var/tmp/kakehashi-cluster"))
PORTS = {"slurm": 2222, "pbs": 2223, "sge-site": 2224, "sge": 2225, "slurm-slow": 2226}


# ------------------------------------------------------------------------------------------------ pytest-xdist
# `make test` runs the suite on several xdist workers (docs/decisions/0047). Each worker is a run of its own
# (tests/settings.py: database, queue, cache prefix, S3 server, directories); these rules keep together the tests that
# share something costly or stateful, so it is set up once and never seen half-used by two workers:
# - the tests of one module that use a module-scoped fixture (a `make run` stack, jobs submitted for the module);
# - the tests that use one of SHARED_SESSION_FIXTURES (one JupyterHub per run, not one per worker);
# - the tests that stop the worker's live Celery worker (`no_live_worker`): spread over every worker, each stop cost
#   the next test that wants one a new Celery worker (about 3 s of CPU; 23 starts in a run of three workers); one after
#   the other on one worker, they stop it once.
# `--dist loadgroup` sends each group whole to one worker; any other test goes wherever a worker is free.
SHARED_SESSION_FIXTURES = {"hub": "hub", "session_hub": "session-hub"}


def _xdist_group(item: pytest.Item) -> str | None:
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return None
    for name in info.names_closure:
        if name in SHARED_SESSION_FIXTURES:
            return SHARED_SESSION_FIXTURES[name]
    for name in info.names_closure:
        for fixturedef in info.name2fixturedefs.get(name, ()):
            # The suite's own fixtures (a plugin's have no baseid: pytest-django's class-scoped autouse one is cheap).
            if fixturedef.baseid and fixturedef.scope in ("module", "package", "class"):
                return item.nodeid.split("::")[0]
    if "no_live_worker" in info.names_closure:
        return "no-live-worker"
    return None


def pytest_collection_modifyitems(config, items):
    # Under xdist the workers collect (the controller only schedules); a worker's own numprocesses is None.
    workers = int(getattr(config, "workerinput", {}).get("workercount") or 0)
    if not workers:
        return
    for item in items:
        group = _xdist_group(item)
        if group and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(group))
    # pytest-timeout's bound is a guard against a hung test, set for one process with the cores to itself: with
    # more workers than cores, or a machine already busy, a CPU-bound test gets a smaller share of a core, so the
    # guard grows by that much (four times at most).
    cores = os.cpu_count() or 1
    share = min(4.0, max(1.0, workers / cores, os.getloadavg()[0] / cores))
    for item in items:
        marker = item.get_closest_marker("timeout")
        seconds = marker.args[0] if marker and marker.args else float(config.getini("timeout") or 0)
        if seconds:
            item.add_marker(pytest.mark.timeout(seconds * share))
    # Workers take tests in collection order: a file of CPU-bound tests (the hostile-input walks render hundreds of
    # previews) would keep every worker busy on two cores at once while none waits on a scheduler. Each module's
    # tests are spread evenly over the whole run instead (its own order kept): a module of 150 tests and one of 3
    # both run from the start to the end, mixing the waiting tests with the computing ones.
    modules: dict[str, list[pytest.Item]] = {}
    for item in items:
        modules.setdefault(item.nodeid.split("::")[0], []).append(item)
    spread = [((index + 0.5) / len(tests), order, item)
              for order, tests in enumerate(modules.values()) for index, item in enumerate(tests)]
    items[:] = [item for _, _, item in sorted(spread, key=lambda entry: entry[:2])]
    # Longest first: a run ends when its last test does, and the every-form walk (85 s), spread to the end of its
    # module, was taken last and ran alone for a minute and a half while the other workers had finished. Tests marked
    # `long` come right after the groups (xdist takes the groups first, the largest first), so the run ends on short
    # tests that fill the workers evenly.
    items.sort(key=lambda item: item.get_closest_marker("long") is None)


class _IdsForPytest9:
    """Two plugins write a test's id into `item._nodeid`, where pytest 9 no longer reads it (it keeps the id in
    `item._id`, a NodeId); this writes it where pytest 9 reads it, after every other collection hook:

    - schemathesis names each API operation's test `test…[GET /api/v1/jobs/]`, but under pytest 9 all 50 of them had
      the id of their function. In one process they all ran under one name; under xdist, which schedules by id,
      49 of the 50 never ran at all, and nothing said so. Each gets the id its name says.
    - xdist's loadgroup finds a test's group in its id (`path::test@group`), which its worker hook writes into
      `item._nodeid`, so every group was ignored: a module's `make run` stack was built again on each worker that
      took one of its tests, and each worker started a hub of its own."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config, items):
        from _pytest.nodeid import NodeId

        for item in items:
            named = f"{item.parent.nodeid}::{item.name}"
            if isinstance(item, pytest.Function) and item.nodeid != named:
                item._id = NodeId.parse(named)
        if not getattr(config.option, "loadgroup", False):  # set by xdist for --dist loadgroup
            return
        for item in items:
            names = sorted({str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
                            for mark in item.iter_markers("xdist_group")})
            if names and "@" not in item.nodeid.rpartition("]")[2]:
                item._id = NodeId.parse(f"{item.nodeid}@{'_'.join(names)}")


class _CPUPerTest:
    """KAKEHASHI_TEST_CPU=FILE: each test's CPU seconds in this pytest process (the test and the live server's threads
    serving it; not the processes it starts, which bench/suite_cpu.py counts), appended as `seconds<TAB>test id<TAB>
    start<TAB>end` (wall clock, epoch seconds) to FILE.<worker>. --durations tells where a run waits; this tells what
    a test costs the two cores, and the wall clock when each worker was busy (what the run's last minutes wait for)."""

    def __init__(self, path: str) -> None:
        self.path = f"{path}.{os.environ.get('PYTEST_XDIST_WORKER', 'main')}"

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        import resource

        def spent() -> float:
            usage = resource.getrusage(resource.RUSAGE_SELF)
            return usage.ru_utime + usage.ru_stime

        before, start = spent(), time.time()
        yield
        with open(self.path, "a") as out:
            out.write(f"{spent() - before:.2f}\t{item.nodeid}\t{start:.1f}\t{time.time():.1f}\n")


def pytest_configure(config):
    config.pluginmanager.register(_IdsForPytest9(), "kakehashi-ids")
    if os.environ.get("KAKEHASHI_TEST_CPU"):
        config.pluginmanager.register(_CPUPerTest(os.environ["KAKEHASHI_TEST_CPU"]), "kakehashi-cpu")


def _template_database() -> str:
    """The name of this run's migrated template database, migrated by the first xdist worker that asks (under a file
    lock) while the others wait: each worker's test database is then a copy of it (CREATE DATABASE … TEMPLATE, about
    a second) instead of four migrations at once on two cores. The controller drops it at the end."""
    import fcntl

    import psycopg

    db = settings.DATABASES["default"]
    base = os.environ["KAKEHASHI_TEST_RUN"].removesuffix(os.environ["PYTEST_XDIST_WORKER"])
    template = f"test_kakehashi_{base}_template"
    dsn = {"host": db["HOST"] or "127.0.0.1", "port": db["PORT"] or 5432, "user": db["USER"] or "postgres",
           "password": db["PASSWORD"] or None, "dbname": "postgres", "autocommit": True}
    with open(f"/tmp/kakehashi-test-{base}-template.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with psycopg.connect(**dsn) as conn:
            if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [template]).fetchone():
                return template
            building = f"{template}_building"
            conn.execute(f'DROP DATABASE IF EXISTS "{building}"')
            conn.execute(f'CREATE DATABASE "{building}"')
            url = f"postgres://{dsn['user']}@{dsn['host']}:{dsn['port']}/{building}"
            subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v0"], cwd=ROOT, check=True,
                           env={**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings", "DATABASE_URL": url})
            conn.execute(f'ALTER DATABASE "{building}" RENAME TO "{template}"')  # there only once migrated
    return template


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix):
    """Under xdist, each worker's test database is copied from the run's migrated template (_template_database)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        settings.DATABASES["default"].setdefault("TEST", {})["TEMPLATE"] = _template_database()


def pytest_unconfigure(config):
    """The controller of an xdist run drops the template its workers copied their databases from, and any worker's
    database the worker could not drop itself (pytest-django gives up when a process the tests started still holds a
    connection to it: one database left behind a run)."""
    if hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None):
        return
    import psycopg

    db = settings.DATABASES["default"]
    try:
        with psycopg.connect(host=db["HOST"] or "127.0.0.1", port=db["PORT"] or 5432, user=db["USER"] or "postgres",
                             password=db["PASSWORD"] or None, dbname="postgres", autocommit=True) as conn:
            prefix = f"test_kakehashi_{os.environ['KAKEHASHI_TEST_RUN']}"
            left = conn.execute("SELECT datname FROM pg_database WHERE starts_with(datname, %s)", [prefix]).fetchall()
            for (name,) in left:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    except psycopg.Error:
        pass
    Path(f"/tmp/kakehashi-test-{os.environ['KAKEHASHI_TEST_RUN']}-template.lock").unlink(missing_ok=True)


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="session")
def test_cluster() -> Path:
    """The harness is up (started here if `make cluster-up` was not run)."""
    if not all(_port_open(p) for p in PORTS.values()):
        # One starter at a time (xdist workers ask together); up.sh is idempotent for the ones after.
        import fcntl

        with open("/tmp/kakehashi-cluster-up.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not all(_port_open(p) for p in PORTS.values()):
                subprocess.run([str(ROOT / "tests/cluster/up.sh")], check=True)
    return CLUSTER_DIR


@pytest.fixture(scope="session")
def known_hosts(test_cluster) -> str:
    return (test_cluster / "known_hosts").read_text()


@pytest.fixture(scope="session")
def user_key(test_cluster):
    def key(user: str) -> str:
        return (test_cluster / "keys" / user).read_text()

    return key


@pytest.fixture(scope="session")
def transport_for(known_hosts, user_key):
    def make(login: str, user: str = "alice") -> SSHTransport:
        return SSHTransport("127.0.0.1", PORTS[login], user, user_key(user), known_hosts, timeout=30)

    yield make
    SSHTransport.close_all()




@pytest.fixture(scope="session", autouse=True)
def object_store(tmp_path_factory):
    """The suite's S3 server (SeaweedFS) with this run's bucket, as tests/settings.py configured it."""
    from tests.seaweedfs import SeaweedFS

    server = SeaweedFS(tmp_path_factory.mktemp("seaweedfs"), int(os.environ["KAKEHASHI_TEST_S3_PORT"]),
                       settings.KAKEHASHI_S3_ACCESS_KEY_ID, settings.KAKEHASHI_S3_SECRET_ACCESS_KEY).start()
    server.create_bucket(settings.KAKEHASHI_S3_BUCKET)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def make_run_database(tmp_path_factory) -> Path:
    """`make run`'s SQLite, migrated once per run and shared by the xdist workers (tests/makerun.py)."""
    from tests.makerun import migrated_database

    root = tmp_path_factory.getbasetemp()
    return migrated_database(root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root)


@pytest.fixture
def filesystem_storage(settings, tmp_path) -> Path:
    """No object store: files go through the portal onto its disk (tmp_path/media), as with `make run`."""
    settings.MEDIA_ROOT = str(tmp_path / "media")
    settings.KAKEHASHI_S3_BUCKET = ""
    settings.STORAGES = {**settings.STORAGES, "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"}}
    return tmp_path / "media"


@pytest.fixture(scope="session")
def moto_aws():
    """AWS's APIs (Batch, EC2, IAM, CloudWatch Logs, STS, Pricing's absence) on a moto server of this run."""
    from tests.moto_aws import MotoAWS

    aws = MotoAWS.start()
    yield aws
    aws.stop()


@pytest.fixture(scope="session")
def cloud_bucket(object_store):
    """The suite's S3 server with a bucket of its own for cloud jobs' directories: (server, bucket)."""
    bucket = f"kakehashi-cloud-jobs-{os.environ['KAKEHASHI_TEST_RUN']}"
    object_store.create_bucket(bucket)
    return object_store, bucket


@pytest.fixture
def aws_settings(moto_aws, cloud_bucket) -> dict:
    """An AWS Batch cluster's options: moto for AWS's APIs, SeaweedFS for the job files, a fresh network."""
    from backends.aws_batch import _client

    store, bucket = cloud_bucket
    moto_aws.reset()
    _client.cache_clear()  # no event hook or Stubber of an earlier test on the clients this one gets
    return {"region": moto_aws.region, "endpoint_url": moto_aws.endpoint, "s3_endpoint_url": store.endpoint,
            "bucket": bucket, "cluster": "aws", **moto_aws.network()}


@pytest.fixture
def aws_site(local_site, aws_settings, cloud_bucket):
    """local_site plus an AWS Batch cluster "aws" (moto + SeaweedFS) set up with cloud_setup: 8×A100 p4d on
    demand and a Spot g5 priced from the price table, the NGC PyTorch image as software, project "vision"
    allocated there, and its budget in yen (1 USD = 150 JPY, 1 point = 10 JPY)."""
    from portal.budgets.models import UnitConversion
    from portal.catalog.models import CloudPrice, HardwareType, Software
    from portal.catalog.prices import apply_prices
    from portal.cloud.setup import set_up
    from portal.clusters.models import Allocation, CloudCredential, Cluster

    store, _ = cloud_bucket
    budget = local_site.budget
    budget.unit, budget.amount = "JPY", Decimal("20000")
    budget.save()
    UnitConversion.objects.create(from_unit="USD", to_unit="JPY", factor=Decimal("150"))
    UnitConversion.objects.create(from_unit="points", to_unit="JPY", factor=Decimal("10"))
    cluster = Cluster.objects.create(slug="aws", name="AWS Tokyo", kind="aws-batch", options=aws_settings,
                                     work_root="kakehashi-jobs")
    credential = CloudCredential(cluster=cluster, access_key_id=store.access_key)
    credential.set_secret(store.secret_key)
    credential.save()
    p4d = HardwareType.objects.create(
        cluster=cluster, slug="aws-p4d", name="AWS p4d.24xlarge (8×A100)", gpu_model="a100", gpus_per_node=8,
        cpus_per_node=96, memory_gb=1000, max_nodes=2, max_walltime_hours=24,
        scheduler_mapping={"instance_type": "p4d.24xlarge", "market": "on-demand"})
    g5 = HardwareType.objects.create(
        cluster=cluster, slug="aws-g5-spot", name="AWS g5.xlarge Spot (1×A10G)", gpu_model="a10g", gpus_per_node=1,
        cpus_per_node=4, memory_gb=14, max_nodes=1, scheduler_mapping={"instance_type": "g5.xlarge", "market": "spot"})
    CloudPrice.objects.create(region=aws_settings["region"], instance_type="p4d.24xlarge", price_per_hour=Decimal("32.7726"))
    CloudPrice.objects.create(region=aws_settings["region"], instance_type="g5.xlarge", market="spot",
                              price_per_hour=Decimal("0.4510"))
    apply_prices()
    p4d.refresh_from_db()
    g5.refresh_from_db()
    software = Software.objects.create(slug="pytorch", name="PyTorch (NGC 24.05)", kind="container",
                                       image="docker://nvcr.io/nvidia/pytorch:24.05-py3")
    software.clusters.add(cluster, local_site.cluster)
    Allocation.objects.create(project=local_site.project, cluster=cluster)
    set_up(cluster)
    local_site.aws, local_site.p4d, local_site.g5, local_site.pytorch = cluster, p4d, g5, software
    local_site.store = store
    return local_site


@pytest.fixture(scope="session")
def worker_log_path() -> Path:
    path = Path(settings.VAR_DIR) / "worker.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def portal_process_env(**env_overrides: str) -> dict[str, str]:
    """The environment of a portal process a test starts (a worker, the tunnel process): the test settings on the
    test database."""
    db = connection.settings_dict
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DATABASE_URL": f"postgres://{db['USER'] or 'postgres'}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}",
        "PYTHONUNBUFFERED": "1",
        # As production keeps them (portal/settings.py): a live worker's beat runs a task each second, and a new
        # connection for each is a PostgreSQL backend forked and authenticated (8,851 backends a run before, ~2,100 after).
        "DATABASE_CONN_MAX_AGE": "300",
        **env_overrides,
    }


class TunnelProcess:
    """`manage.py session_tunnels` on the test database, as docker-compose and make run start it: started, killed
    (SIGKILL, a crash) and started again by a test."""

    COMMAND = [sys.executable, "manage.py", "session_tunnels", "--interval", "0.5"]

    def __init__(self, log: Path) -> None:
        self.log = log
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        start = self.log.stat().st_size if self.log.exists() else 0
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(self.COMMAND, cwd=ROOT, env=portal_process_env(), stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)

        def listening() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(f"session_tunnels exited at start:\n{self.log.read_text()[-3000:]}")
            with open(self.log, "rb") as fh:
                fh.seek(start)
                return b"session tunnels: listening" in fh.read()

        wait_for(listening, timeout=60, interval=0.1, message="the tunnel process started")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()


def _start_celery(command: list[str], queue: str, log_path: Path, ready: bytes, env_overrides: dict[str, str]
                  ) -> subprocess.Popen:
    """`celery -A workers <command>` on this run's `queue`, in a session of its own (so a test can kill it whole),
    appending to `log_path`; returned once the log says `ready`."""
    env = portal_process_env(CELERY_TASK_DEFAULT_QUEUE=queue, **env_overrides)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    start = log_path.stat().st_size if log_path.exists() else 0
    with open(log_path, "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "celery", "-A", "workers", *command], cwd=ROOT, env=env,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"celery {command[0]} exited at start; see {log_path}")
        with open(log_path, "rb") as fh:
            fh.seek(start)
            if ready in fh.read():
                return proc
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"celery {command[0]} did not become ready; see {log_path}")


def _beat_schedule(name: str) -> str:
    return str(Path(settings.VAR_DIR) / f"beat-schedule-{name}")


def start_worker(name: str, queue: str, log_path: Path, *, beat: bool = True, **env_overrides: str) -> subprocess.Popen:
    """A real `celery worker` on the test database, with beat inside it (`-B`) unless `beat=False` (then start_beat
    runs it apart, as docker-compose.yml does)."""
    command = ["worker", *(["-B", "-s", _beat_schedule(name)] if beat else []), "-Q", queue, "--concurrency", "2",
               "--loglevel", "INFO", "-n", f"{name}-{os.environ['KAKEHASHI_TEST_RUN']}@%h"]
    return _start_celery(command, queue, log_path, b"ready.", env_overrides)


def start_beat(name: str, queue: str, log_path: Path, **env_overrides: str) -> subprocess.Popen:
    """`celery beat` on its own, sending the periodic tasks to `queue`."""
    command = ["beat", "--loglevel", "INFO", "-s", _beat_schedule(name)]
    return _start_celery(command, queue, log_path, b"beat: Starting...", env_overrides)


def stop_worker(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait(timeout=10)


# The live worker: a `celery worker` and, apart from it as in docker-compose.yml, its `celery beat`. Both are kept for
# the tests after the one that started them (slow to start); between the tests that hold the `live_worker` fixture the
# beat is stopped (SIGSTOP) and continued when the next one begins: about three quarters of a run has no test that
# wants it, and its sweeps (a tracking cycle each second, ~12 ms of CPU in the worker each) cost four workers about
# 30 CPU-s a run (3,433 sweeps, 1,106 with the stops). A stopped beat sends the sweeps that fell due as soon as it
# continues. Only the beat is stopped: a worker stopped in the middle of a task could hold a row lock that the next
# test's flush would wait on for good.
_LIVE_WORKER: dict[str, subprocess.Popen] = {}
# Settings the shared live worker is started with beyond the test settings: a test that changes a setting the
# worker reads (the sessions hub's address) tells it through live_worker_knows; it keeps them for later tests.
_LIVE_WORKER_ENV: dict[str, str] = {}
_LIVE_WORKER_HELD = False  # whether a test holds the fixture now: its beat runs


def _live_beat_runs(runs: bool) -> None:
    beat = _LIVE_WORKER.get("beat")
    if beat is not None and beat.poll() is None:
        os.kill(beat.pid, signal.SIGCONT if runs else signal.SIGSTOP)


def _start_live_worker(log_path: Path) -> None:
    queue = settings.CELERY_TASK_DEFAULT_QUEUE
    _LIVE_WORKER["proc"] = start_worker("test", queue, log_path, beat=False, **_LIVE_WORKER_ENV)
    _LIVE_WORKER["beat"] = start_beat("test", queue, log_path, **_LIVE_WORKER_ENV)
    _live_beat_runs(_LIVE_WORKER_HELD)


def _stop_live_worker() -> None:
    _live_beat_runs(True)  # a stopped process keeps its SIGTERM pending
    for name in ("beat", "proc"):
        proc = _LIVE_WORKER.pop(name, None)
        if proc is not None:
            stop_worker(proc)


def _live_worker_runs() -> bool:
    return all(name in _LIVE_WORKER and _LIVE_WORKER[name].poll() is None for name in ("proc", "beat"))


def live_worker_knows(**env: str) -> None:
    """Have the shared live worker run with these environment settings from now on (restarted at once if one runs
    without them: the worker reads Django's settings from its environment, not from this process)."""
    if all(_LIVE_WORKER_ENV.get(name) == value for name, value in env.items()):
        return
    _LIVE_WORKER_ENV.update(env)
    if _live_worker_runs():
        _stop_live_worker()
        _start_live_worker(Path(settings.VAR_DIR) / "worker.log")


@pytest.fixture(scope="session")
def _live_worker_ends_with_the_session():
    yield
    _stop_live_worker()


@pytest.fixture
def live_worker(django_db_setup, django_db_blocker, worker_log_path, _live_worker_ends_with_the_session):
    """A real Celery worker and its beat on this run's Redis queue, using the test database.

    Started on first use and kept for the tests after (it is slow to start), until a test that must not share the
    database with it asks for `no_live_worker`; the next test that wants one starts it again. Its beat runs while a
    test holds this fixture."""
    global _LIVE_WORKER_HELD
    _LIVE_WORKER_HELD = True
    if _live_worker_runs():
        _live_beat_runs(True)
    else:
        _stop_live_worker()
        _start_live_worker(worker_log_path)
    yield _LIVE_WORKER["proc"]
    _LIVE_WORKER_HELD = False
    _live_beat_runs(False)


@pytest.fixture
def no_live_worker():
    """Stop the live worker an earlier test left running: its beat tracks every cluster in the test database each
    second and it consumes the default queue, so it would dispatch, track and notify this test's jobs first (in
    its own process, where this test's locmem outbox and eager settings do not reach)."""
    _stop_live_worker()


@pytest.fixture
def eager():
    """Tasks run in this process, right where they are enqueued (after the commit, for those enqueued on commit),
    and the locmem outbox starts empty: what a worker would do, seen by the test."""
    from celery import current_app
    from django.core import mail

    before = current_app.conf.task_always_eager
    current_app.conf.task_always_eager = True
    mail.outbox.clear()
    yield
    current_app.conf.task_always_eager = before


def listening(port: int, host: str = "127.0.0.1") -> bool:
    """Whether something accepts connections on host:port now."""
    try:
        socket.create_connection((host, port), timeout=2).close()
    except OSError:
        return False
    return True


# How long a job on the shared test cluster may wait in its queue behind other tests' jobs, beyond its own run: a
# two-node training holds both nodes of its scheduler whole (all 16 of Slurm's GPUs) for two minutes, four on a
# loaded machine, and the long tests, which start together, include two. A wait for a job that needs a whole node
# adds this (a one-GPU job too when it must run before the test can go on).
QUEUE_WAIT = 240


def wait_for(predicate, timeout: float = 30.0, interval: float = 0.2, message: str = "condition"):
    """Poll until predicate() is truthy; return its value or fail with `message`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {message}")


def ended_job(job_id: int):
    """The job once it has ended (for wait_for), else None."""
    from portal.jobs.models import Job

    job = Job.objects.get(pk=job_id)
    return job if job.is_final else None


def job_output(job, stream: str) -> str:
    """The job's stdout or stderr as the portal stored it, once it is complete."""
    from portal.jobs.models import JobOutput

    out = wait_for(lambda: JobOutput.objects.filter(job=job, stream=stream, complete=True).first(), message=stream)
    return bytes(out.data).decode()


# ------------------------------------------------------------------------------------------------ builders


@pytest.fixture
def make_user(django_user_model):
    def make(username: str, *, staff: bool = False, password: str = "pw-for-tests-123", email: str | None = None):
        user = django_user_model.objects.create_user(
            username=username, password=password, email=email or f"{username}@example.org", is_staff=staff
        )
        return user

    return make


@pytest.fixture
def local_site(make_user, tmp_path, settings):
    """A project on the local cluster with a strict budget, an owner `alice`, and an outsider `mallory`."""
    from portal.budgets.models import Budget
    from portal.catalog.models import HardwareType
    from portal.clusters.models import Allocation, Cluster, Kind
    from portal.projects.models import Membership, Project, Role

    settings.KAKEHASHI_LOCAL_JOBS_DIR = str(Path(settings.VAR_DIR) / "jobs")
    alice = make_user("alice")
    mallory = make_user("mallory")
    project = Project.objects.create(slug="vision", name="Vision lab")
    other = Project.objects.create(slug="nlp", name="NLP lab")
    Membership.objects.create(user=alice, project=project, role=Role.OWNER)
    Membership.objects.create(user=mallory, project=other, role=Role.OWNER)
    cluster = Cluster.objects.create(slug="local", name="This machine", kind=Kind.LOCAL,
                                     options={"root": settings.KAKEHASHI_LOCAL_JOBS_DIR})
    hardware = HardwareType.objects.create(cluster=cluster, slug="local-cpu", name="Local CPU", cpus_per_node=2,
                                           max_nodes=1, max_walltime_hours=12, rate=Decimal("10"), rate_unit="points")
    Allocation.objects.create(project=project, cluster=cluster)
    Allocation.objects.create(project=other, cluster=cluster)
    budget = Budget.objects.create(project=project, amount=Decimal("100"), unit="points", strict=True)

    class Site:
        pass

    site = Site()
    site.alice, site.mallory, site.project, site.other = alice, mallory, project, other
    site.cluster, site.hardware, site.budget = cluster, hardware, budget
    return site


@pytest.fixture(scope="session")
def cluster_keys(request):
    """One key pair per researcher for the whole run, installed once on the test cluster's login nodes."""
    from portal.clusters.actions import generate_key_pair
    from portal.dev.loopback import install_public_key

    request.getfixturevalue("test_cluster")
    keys = {}
    for user in ("alice", "bob"):
        private, public = generate_key_pair(f"kakehashi-tests:{user}")
        install_public_key(user, public)
        keys[user] = (private, public)
    return keys


@pytest.fixture
def hpc_site(local_site, cluster_keys, test_cluster, make_user):
    """local_site plus the loopback clusters registered, allocated to project "vision" as group kkdemo, and
    alice's (and bob's) accounts linked with this run's keys."""
    from portal.clusters.models import ClusterAccount
    from portal.dev.loopback import register_clusters
    from portal.projects.models import Membership, Role

    clusters = register_clusters(test_cluster, local_site.project)
    bob = make_user("bob")
    Membership.objects.create(user=bob, project=local_site.project, role=Role.MEMBER)
    for user, name in ((local_site.alice, "alice"), (bob, "bob")):
        private, public = cluster_keys[name]
        for cluster in clusters.values():
            account = ClusterAccount(cluster=cluster, user=user, username=name, public_key=public)
            account.set_private_key(private)
            account.save()
    local_site.clusters, local_site.bob = clusters, bob
    return local_site


@pytest.fixture(autouse=True, scope="session")
def _flush_retries_when_the_live_worker_holds_a_lock():
    """Transactional tests end by emptying the tables they wrote (tests/testdb) while the live worker may still be
    locking rows of the test that just ended; PostgreSQL then breaks the deadlock by failing one side. Retry the
    flush."""
    from django.db import OperationalError
    from django.test import TransactionTestCase

    original = TransactionTestCase._fixture_teardown

    def teardown(self):
        for attempt in range(5):
            try:
                return original(self)
            except Exception as exc:  # noqa: BLE001 - flush wraps the database error in a CommandError
                cause = exc.__cause__ or exc
                if attempt == 4 or not (isinstance(cause, OperationalError) and "deadlock" in str(cause)):
                    raise
                time.sleep(0.2 * (attempt + 1))
        return None

    TransactionTestCase._fixture_teardown = teardown
    yield
    TransactionTestCase._fixture_teardown = original


@pytest.fixture(scope="session")
def browser():
    """One headless Chromium for all browser tests, wherever they live: two Playwright instances in one process
    clash ("Sync API inside the asyncio loop")."""
    from tests.browser.conftest import launch_browser

    yield from launch_browser()
