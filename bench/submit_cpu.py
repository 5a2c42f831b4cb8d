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
submits), BENCH_CODE_ROOT, BENCH_OUT. Writes bench/results-submit-cpu.md.
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

JOBS = int(os.environ.get("BENCH_JOBS", "200"))
BATCH = int(os.environ.get("BENCH_BATCH", "200"))
REPEATS = int(os.environ.get("BENCH_REPEATS", "3"))
REDIS_DB = int(os.environ.get("BENCH_REDIS_DB", "12"))
HARDWARE = "slurm-a100x1"


def main() -> int:
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
    from portal.dev.loopback import DEFAULT_STATE, link_researchers, register_clusters
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
    text = "\n".join([
        f"Code of {CODE.name}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: one process, production profile, PostgreSQL and Redis "
        f"on loopback, 2 cores shared with other work (load average {load_before:.1f} before, {load:.1f} after); "
        f"CPU of this process only, median of {REPEATS} rounds.{top}",
        "",
        "| Request | CPU of the web process |",
        "| --- | --- |",
        f"| the floor: `GET /api/v1/me/` | {results['floor']:.1f} ms a request |",
        f"| one job: `POST /api/v1/jobs/` (Slurm) | {results['single']:.1f} ms a request |",
        f"| one job above the floor | {results['single'] - results['floor']:.1f} ms |",
        f"| bulk: `POST /api/v1/jobs/batch/` of {BATCH} jobs (Slurm) | " + (
            f"{results['bulk']:.2f} ms a job ({results['bulk'] * BATCH / 1000:.2f} CPU-s the request; "
            f"{bulk_wall:.2f} s wall once) |" if has_bulk else "— (this code has no bulk submit) |"),
        "",
    ])
    print(text)
    Path(os.environ.get("BENCH_OUT", ROOT / "bench" / "results-submit-cpu.md")).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
