"""The CPU one submit request costs the web process (issue 28, goal 4a: at most 8 ms), measured where wall time is not
stable: the process's own CPU time (`time.process_time`) over N sequential requests, and a CPU profile of them.

In one process, as a gunicorn worker runs it: Django's WSGI handler with every middleware, the production profile,
PostgreSQL on loopback, the Celery producer enqueueing to Redis (no worker consumes: nothing reaches a cluster, the
jobs stay queued), alice's API token, the loopback clusters registered as `make cluster-up` does. Cases, each after
warm-up requests outside the measurement:

- the floor: `GET /api/v1/me/` (token, throttle, a small answer): what any API request costs;
- one job: `POST /api/v1/jobs/` to Slurm (what a script submitting jobs one by one pays a job);
- bulk: `POST /api/v1/jobs/batch/` of BENCH_BATCH (200) jobs, CPU divided by the jobs.

CPU time is charged to this process only (PostgreSQL's and Redis's own work is not in it); the machine's other load
slows it little, unlike wall time. Settings: BENCH_JOBS (200 single submits), BENCH_BATCH (200), BENCH_REPEATS (3:
the median of the rounds is reported), BENCH_PROFILE_DIR (writes submit.prof, a cProfile of one round of single
submits), BENCH_CODE_ROOT, BENCH_OUT. Writes bench/results-submit-cpu.md. Each case's SQL statements (transaction
brackets not counted) are counted on one request.

Before/after side by side: BENCH_BEFORE=/other/checkout runs this bench on that checkout's code and on this one in
turn, in separate processes (each its own database), BENCH_PAIRS (3) times alternating, and reports the median of
each side's runs with the load average around them: on two shared cores the machine's speed moves between runs,
more than some changes do, so only figures taken minutes apart in one session are compared.
"""

from __future__ import annotations

import cProfile
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# BENCH_CODE_ROOT=/other/checkout measures that checkout's portal in this process (a "before"; its bulk case only
# if it has the endpoint).
CODE = Path(os.environ.get("BENCH_CODE_ROOT", ROOT))
sys.path.insert(0, str(CODE))

from bench import throughput  # noqa: E402 - the same environment, database and registration as the throughput bench

# bench.throughput puts its own checkout first on sys.path: the measured one goes first again, or a "before" run
# would import this checkout's portal (as it did until issue 28's second pass at goal 4a).
sys.path.insert(0, str(CODE))

JOBS = int(os.environ.get("BENCH_JOBS", "200"))
BATCH = int(os.environ.get("BENCH_BATCH", "200"))
REPEATS = int(os.environ.get("BENCH_REPEATS", "3"))
REDIS_DB = int(os.environ.get("BENCH_REDIS_DB", "12"))
HARDWARE = "slurm-a100x1"


def main() -> int:
    if os.environ.get("BENCH_BEFORE"):
        return side_by_side(Path(os.environ["BENCH_BEFORE"]))
    env = throughput._env()
    env.update({"CELERY_BROKER_URL": f"redis://127.0.0.1:6379/{REDIS_DB}", "REDIS_URL": f"redis://127.0.0.1:6379/{REDIS_DB}",
                "ALLOWED_HOSTS": "127.0.0.1,localhost,testserver"})
    os.environ.update(env)
    import subprocess

    import redis

    broker = redis.Redis(host="127.0.0.1", port=6379, db=REDIS_DB)
    if broker.dbsize():
        print(f"Redis database {REDIS_DB} is not empty: pick another with BENCH_REDIS_DB", file=sys.stderr)
        return 2
    db = throughput.DB_NAME
    throughput._pg(f'DROP DATABASE IF EXISTS "{db}"')
    throughput._pg(f'CREATE DATABASE "{db}"')
    try:
        subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v0"], cwd=CODE, env=env, check=True)
        import django

        django.setup()
        return _run()
    finally:
        from django.db import connections

        connections.close_all()
        broker.flushdb()
        throughput._pg(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')


def _run() -> int:
    from decimal import Decimal

    from django.test import Client

    from portal.api.tokens import issue_token
    from portal.budgets.models import Budget
    try:
        from portal.dev.loopback import DEFAULT_STATE, link_researchers, register_clusters
    except ImportError:  # a "before" from when the loopback helpers lived in accounts (issue 29 moved them)
        from portal.accounts.loopback import DEFAULT_STATE, link_researchers, register_clusters
    from portal.projects.models import Project

    project = Project.objects.create(slug="bench", name="Bench")
    Budget.objects.create(project=project, amount=Decimal("100000000"), unit="points", strict=True)
    clusters = register_clusters(DEFAULT_STATE, project)
    user = link_researchers(clusters, project, verify=False)["alice"]
    _, secret = issue_token(user, name="submit cpu bench", scopes=["read", "submit"])
    client = Client(HTTP_AUTHORIZATION=f"Bearer {secret}")
    counter = iter(range(10**9))

    def body() -> dict:
        return {"project": "bench", "name": f"cpu-{next(counter)}", "script": "sleep 300", "hardware": HARDWARE,
                "walltime": "00:05:00"}

    def floor() -> None:
        assert client.get("/api/v1/me/").status_code == 200

    def single() -> None:
        response = client.post("/api/v1/jobs/", json.dumps(body()), content_type="application/json")
        assert response.status_code == 201, response.content[:500]

    def bulk() -> None:
        response = client.post("/api/v1/jobs/batch/", json.dumps({"jobs": [body() for _ in range(BATCH)]}),
                               content_type="application/json")
        assert response.status_code == 201, response.content[:500]

    for _ in range(20):  # every lazy import and first-use cache outside the measurement
        floor()
        single()
    has_bulk = client.post("/api/v1/jobs/batch/", "{}", content_type="application/json").status_code != 404
    statements = {"floor": _statements(floor), "single": _statements(single)}
    if has_bulk:
        bulk()

    def measure(call, times: int, per: int) -> float:
        """CPU milliseconds of this process per unit (a request, or a job of a batch): the median of REPEATS rounds."""
        rounds = []
        for _ in range(REPEATS):
            start = time.process_time()
            for _ in range(times):
                call()
            rounds.append((time.process_time() - start) * 1000 / (times * per))
        return statistics.median(rounds)

    load_before = os.getloadavg()[0]
    results = {
        "floor": measure(floor, JOBS, 1),
        "single": measure(single, JOBS, 1),
        "bulk": measure(bulk, 1, BATCH) if has_bulk else None,
    }
    wall_start = time.perf_counter()
    if has_bulk:
        bulk()
    bulk_wall = time.perf_counter() - wall_start
    profile_dir = os.environ.get("BENCH_PROFILE_DIR")
    top = ""
    if profile_dir:
        profiler = cProfile.Profile(time.process_time)
        profiler.enable()
        for _ in range(JOBS):
            single()
        profiler.disable()
        profiler.dump_stats(str(Path(profile_dir) / "submit.prof"))
        top = f" A cProfile of {JOBS} single submits is in {profile_dir}/submit.prof."
    load = os.getloadavg()[0]
    if os.environ.get("BENCH_JSON"):  # one side of a side-by-side run
        Path(os.environ["BENCH_JSON"]).write_text(json.dumps({
            **results, "statements": statements, "load_before": load_before, "load_after": load}))
        return 0
    text = "\n".join([
        f"Code of {CODE.name}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: one process, production profile, PostgreSQL and Redis "
        f"on loopback, 2 cores shared with other work (load average {load_before:.1f} before, {load:.1f} after); "
        f"CPU of this process only, median of {REPEATS} rounds.{top}",
        "",
        "| Request | CPU of the web process |",
        "| --- | --- |",
        f"| the floor: `GET /api/v1/me/` | {results['floor']:.1f} ms a request ({statements['floor']} SQL statements) |",
        f"| one job: `POST /api/v1/jobs/` (Slurm) | {results['single']:.1f} ms a request ({statements['single']} SQL statements) |",
        f"| one job above the floor | {results['single'] - results['floor']:.1f} ms |",
        f"| bulk: `POST /api/v1/jobs/batch/` of {BATCH} jobs (Slurm) | " + (
            f"{results['bulk']:.2f} ms a job ({results['bulk'] * BATCH / 1000:.2f} CPU-s the request; "
            f"{bulk_wall:.2f} s wall once) |" if has_bulk else "— (this code has no bulk submit) |"),
        "",
    ])
    print(text)
    Path(os.environ.get("BENCH_OUT", ROOT / "bench" / "results-submit-cpu.md")).write_text(text)
    return 0


def _statements(request) -> int:
    """The SQL statements one request sends (transaction brackets not counted)."""
    from django.db import connection

    sent = []

    def count(execute, sql, params, many, context):
        if not sql.lstrip().upper().startswith(("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE SAVEPOINT")):
            sent.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(count):
        request()
    return len(sent)


def side_by_side(before: Path) -> int:
    """This bench on `before`'s code and on this checkout's, in turn, BENCH_PAIRS times; one table of medians."""
    import subprocess
    import tempfile

    pairs = int(os.environ.get("BENCH_PAIRS", "3"))
    runs: dict[str, list[dict]] = {"before": [], "after": []}
    load_start = os.getloadavg()[0]
    for _ in range(pairs):
        for side, code in (("before", before), ("after", ROOT)):
            with tempfile.NamedTemporaryFile(suffix=".json") as out:
                env = {key: value for key, value in os.environ.items() if key not in ("BENCH_BEFORE", "BENCH_PROFILE_DIR")}
                env.update(BENCH_CODE_ROOT=str(code), BENCH_JSON=out.name)
                subprocess.run([sys.executable, "-m", "bench.submit_cpu"], cwd=ROOT, env=env, check=True,
                               stdout=subprocess.DEVNULL)
                runs[side].append(json.loads(Path(out.name).read_text()))
    load_end = os.getloadavg()[0]

    def median(side: str, key: str) -> float:
        return statistics.median(run[key] for run in runs[side])

    def cell(side: str, key: str, per: str) -> str:
        values = sorted(run[key] for run in runs[side])
        return f"{median(side, key):.1f} ms{per} ({values[0]:.1f}–{values[-1]:.1f})"

    def above(side: str) -> float:
        return statistics.median(run["single"] - run["floor"] for run in runs[side])

    def statements(side: str, case: str) -> str:
        return "/".join(sorted({str(run["statements"][case]) for run in runs[side]}))

    loads = ", ".join(f"{run['load_before']:.1f}–{run['load_after']:.1f}" for side in ("before", "after")
                      for run in runs[side])
    has_bulk = all(run["bulk"] is not None for run in runs["before"] + runs["after"])
    text = "\n".join([
        f"Before: {before}; after: {ROOT.name}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. One process per "
        f"run, production profile, PostgreSQL and Redis on loopback, 2 cores shared with other work; CPU of the web "
        f"process only (`time.process_time`), each run the median of {REPEATS} rounds of {JOBS} requests; "
        f"{pairs} runs a side, alternating before/after; the median run (lowest–highest). Load average "
        f"{load_start:.1f} at the start, {load_end:.1f} at the end (each run's before–after: {loads}).",
        "",
        "| Request | before | after | SQL statements before → after |",
        "| --- | --- | --- | --- |",
        f"| the floor: `GET /api/v1/me/` | {cell('before', 'floor', '')} | {cell('after', 'floor', '')} | "
        f"{statements('before', 'floor')} → {statements('after', 'floor')} |",
        f"| one job: `POST /api/v1/jobs/` (Slurm) | {cell('before', 'single', '')} | **{cell('after', 'single', '')}** | "
        f"{statements('before', 'single')} → {statements('after', 'single')} |",
        f"| one job above the floor | {above('before'):.1f} ms | {above('after'):.1f} ms | |",
        (f"| bulk: `POST /api/v1/jobs/batch/` of {BATCH}, a job | {median('before', 'bulk'):.2f} ms | "
         f"{median('after', 'bulk'):.2f} ms | |") if has_bulk else "",
        "",
    ])
    print(text)
    Path(os.environ.get("BENCH_OUT", ROOT / "bench" / "results-submit-cpu.md")).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
