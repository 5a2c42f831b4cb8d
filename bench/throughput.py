"""Submit throughput as a user with a script sees it (issue 17, goal 1): the REST API against raw submits.

For Slurm and for the TSUBAME-style Grid Engine cluster of the loopback test cluster, side by side in one run:

- raw:    N `sbatch --hold` (`qsub -h`) one after another over one open paramiko SSH connection as alice;
- portal: N jobs POSTed to `/api/v1/jobs/` by C client threads (httpx, keep-alive) with alice's API token, against
          the stack docker-compose.yml runs: gunicorn `portal.wsgi:application` with 3 workers and one Celery worker
          with `--concurrency 4` (no beat: nothing tracks meanwhile), on a fresh PostgreSQL database and a Redis
          database number of the bench's own. Measured from the first request sent to the last scheduler id recorded
          (each job's `submitted_at`, written with its id; the bench polls the database until every job has one),
          with p50/p95 of one submit request and of submit → scheduler id.

The portal's jobs run `sleep 300` (the API has no hold); at most a few start before the end, and every job both
sides created is cancelled afterwards. Settings: BENCH_JOBS (200), BENCH_CLIENTS (8), BENCH_REDIS_DB (13),
BENCH_PORT (8917), BENCH_CASES (slurm,sge), BENCH_BULK (1: also the N jobs in one `POST /api/v1/jobs/batch/`,
timed from the request to the last scheduler id; 0: not), BENCH_OUT, BENCH_CODE_ROOT (the daemons' checkout); extra environment for the daemons with BENCH_ENV_* (e.g.
BENCH_ENV_KAKEHASHI_CLUSTER_TASK_SLOTS=4). Also the CPU seconds the web server, the worker, PostgreSQL and the
whole machine spent meanwhile (where the time goes), the bench's own
client threads apart, and the floor: as many `GET /api/v1/me/` (the cheapest authenticated request) by the same
clients, to show what any API request costs before a job is recorded; BENCH_PROFILE_DIR=/dir writes a CPU profile of each gunicorn
and Celery process there (bench/profiling.py). Writes bench/results-throughput.md.
"""

from __future__ import annotations

import base64
import os
import shlex
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
# The daemons' code: BENCH_CODE_ROOT=/other/checkout measures that code (the "before" figures; same migrations).
CODE = Path(os.environ.get("BENCH_CODE_ROOT", ROOT))
BIN = Path(sys.executable).parent

JOBS = int(os.environ.get("BENCH_JOBS", "200"))
CLIENTS = int(os.environ.get("BENCH_CLIENTS", "8"))
REDIS_DB = int(os.environ.get("BENCH_REDIS_DB", "13"))
PORT = int(os.environ.get("BENCH_PORT", "8917"))
CASES = os.environ.get("BENCH_CASES", "slurm,sge").split(",")
BULK = os.environ.get("BENCH_BULK", "1") != "0"  # also the same jobs in one bulk request (POST jobs/batch/)
DB_NAME = os.environ.get("BENCH_DB", f"kakehashi_bench_throughput_{os.getpid()}")
PG = os.environ.get("BENCH_PG", "postgres://postgres@127.0.0.1:5432")
STATE = Path(os.environ.get("KAKEHASHI_CLUSTER_DIR", "/var/tmp/kakehashi-cluster"))

# label, hardware slug, raw held submit, scheduler's cancel command
CASE_DEFS = {
    "slurm": ("Slurm", "slurm-a100x1",
              "sbatch --hold --parsable --wrap true -o /dev/null -J raw-tp -p gpu -A kkdemo -t 5 --gres=gpu:a100:1",
              "scancel"),
    "sge": ("Grid Engine (TSUBAME)", "tsubame-s-gpu",
            "qsub -h -terse -w e -g kkdemo -N raw-tp -l s_gpu=1,h_rt=300 -o /dev/null -j y -b y true",
            "qdel"),
}


def _env() -> dict[str, str]:
    """The daemons' environment: docker-compose's production profile, pointed at this machine and the bench's DB."""
    from cryptography.fernet import Fernet

    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "portal.settings",
        "KAKEHASHI_PROFILE": "production",
        "SECRET_KEY": base64.urlsafe_b64encode(os.urandom(48)).decode(),
        "KAKEHASHI_ENCRYPTION_KEYS": Fernet.generate_key().decode(),
        "DATABASE_URL": f"{PG}/{DB_NAME}",
        "CELERY_BROKER_URL": f"redis://127.0.0.1:6379/{REDIS_DB}",
        "REDIS_URL": f"redis://127.0.0.1:6379/{REDIS_DB}",
        "CELERY_TASK_DEFAULT_QUEUE": f"kakehashi-bench-throughput-{os.getpid()}",
        "CACHE_KEY_PREFIX": f"kakehashi-bench-throughput-{os.getpid()}",
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "SECURE_SSL_REDIRECT": "false",
        "SECURE_HSTS_SECONDS": "0",
        "SESSION_COOKIE_SECURE": "false",
        "CSRF_COOKIE_SECURE": "false",
        "KAKEHASHI_VAR_DIR": tempfile.mkdtemp(prefix="kakehashi-bench-throughput-"),
        "KAKEHASHI_API_RATE": "100000/min",  # the bench is one token; the default 600/min would pace it, not the portal
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("KAKEHASHI_TEST_RUN", None)
    for key, value in os.environ.items():
        if key.startswith("BENCH_ENV_"):
            env[key.removeprefix("BENCH_ENV_")] = value
    return env


def _pg(sql: str) -> None:
    import psycopg

    with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
        conn.execute(sql)


def percentile(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    k = (len(ordered) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def main() -> int:
    import logging

    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request would be most of the output
    env = _env()
    os.environ.update(env)
    import redis

    broker = redis.Redis(host="127.0.0.1", port=6379, db=REDIS_DB)
    if broker.dbsize():
        print(f"Redis database {REDIS_DB} is not empty: pick another with BENCH_REDIS_DB", file=sys.stderr)
        return 2
    _pg(f'DROP DATABASE IF EXISTS "{DB_NAME}"')
    _pg(f'CREATE DATABASE "{DB_NAME}"')
    daemons: list[subprocess.Popen] = []
    try:
        subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v0"], cwd=ROOT, env=env, check=True)
        import django

        django.setup()
        return _run(env, daemons)
    finally:
        for proc in daemons:
            _stop(proc)
        from django.db import connections

        connections.close_all()
        broker.flushdb()
        _pg(f'DROP DATABASE IF EXISTS "{DB_NAME}" WITH (FORCE)')


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, 15)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait(timeout=10)


def _start(argv: list[str], env: dict, log: Path, ready: bytes, timeout: float = 90) -> subprocess.Popen:
    out = open(log, "ab")
    proc = subprocess.Popen(argv, cwd=CODE, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{argv[0]} exited at start; see {log}")
        if ready in log.read_bytes():
            return proc
        time.sleep(0.2)
    _stop(proc)
    raise RuntimeError(f"{argv[0]} did not become ready; see {log}")


def _run(env: dict, daemons: list) -> int:
    from decimal import Decimal

    import paramiko

    from portal.api.tokens import issue_token
    from portal.budgets.models import Budget
    from portal.dev.loopback import DEFAULT_STATE, link_researchers, register_clusters
    from portal.projects.models import Project

    project = Project.objects.create(slug="bench", name="Bench")
    Budget.objects.create(project=project, amount=Decimal("100000000"), unit="points", strict=True)
    clusters = register_clusters(DEFAULT_STATE, project)
    # alice (and bob) as `make cluster-up` links them: a portal-made key each, installed on the login node.
    user = link_researchers(clusters, project, verify=False)["alice"]
    _, secret = issue_token(user, name="throughput bench", scopes=["read", "submit"])

    logs = Path(env["KAKEHASHI_VAR_DIR"])
    print(f"daemon logs in {logs}")
    profiled = bool(env.get("BENCH_PROFILE_DIR"))
    daemons.append(_start([str(BIN / "gunicorn"), "portal.wsgi:application", "--bind", f"127.0.0.1:{PORT}",
                           "--workers", "3", *(["-c", "python:bench.profiling"] if profiled else [])],
                          env, logs / "gunicorn.log", b"Booting worker"))
    daemons.append(_start([str(BIN / "celery"), "-A", "bench.profiling" if profiled else "workers", "worker",
                           "--loglevel", "INFO", "--concurrency", "4", "-n", f"bench-throughput-{os.getpid()}@%h"],
                          env, logs / "celery.log", b"ready."))

    rows, details = [], []
    for case in CASES:
        label, hardware, raw_command, cancel = CASE_DEFS[case]
        port = clusters[{"slurm": "slurm-test", "sge": "sge-tsubame-test"}[case]].login_port
        ssh = paramiko.SSHClient()
        ssh.load_host_keys(str(STATE / "known_hosts"))
        ssh.set_missing_host_key_policy(paramiko.RejectPolicy())
        ssh.connect("127.0.0.1", port=port, username="alice", key_filename=str(STATE / "keys" / "alice"),
                    allow_agent=False, look_for_keys=False)
        ssh.get_transport().sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # NODELAY, as the portal's transport sets it
        try:
            _exec(ssh, "true")
            _warm(secret, hardware, project.slug, 8)
            raw_ids, raw_samples = [], []
            raw_before = _cpu(daemons)
            start = time.perf_counter()
            for _ in range(JOBS):
                t = time.perf_counter()
                raw_ids.append(_exec(ssh, raw_command).strip().split(".")[0])
                raw_samples.append(time.perf_counter() - t)
            raw_total = time.perf_counter() - start
            raw_after = _cpu(daemons)
            raw_cpu = {k: raw_after[k] - raw_before[k] for k in raw_after}
            _exec(ssh, shlex.join([cancel, *raw_ids]))

            before = _cpu(daemons)
            portal = _portal(secret, hardware, project.slug, case)
            after = _cpu(daemons)
            portal["cpu"] = {k: after[k] - before[k] for k in after}
            if BULK:
                before = _cpu(daemons)
                portal["bulk"] = _bulk(secret, hardware, project.slug, case)
                after = _cpu(daemons)
                portal["bulk"]["cpu"] = {k: after[k] - before[k] for k in after}
                portal["ids"] += portal["bulk"]["ids"]
            before = _cpu(daemons)
            portal["floor"] = _floor(secret)
            after = _cpu(daemons)
            portal["floor_cpu"] = {k: after[k] - before[k] for k in after}
            portal["ssh"] = _ssh_connections(daemons[1], port)
            _exec(ssh, shlex.join([cancel, *portal["ids"]]) + " >/dev/null 2>&1; true")
        finally:
            ssh.close()
        portal["raw_cpu"] = raw_cpu["machine"]
        portal["raw_programs"] = raw_cpu
        rows.append((label, raw_total, raw_samples, portal))
        details.append(f"{label}: raw {raw_total:.2f} s, portal {portal['total']:.2f} s "
                       f"(×{portal['total'] / raw_total:.2f})")
        print(details[-1], flush=True)

    load = os.getloadavg()
    lines = [
        f"Code of {CODE.name}: {JOBS} jobs, {CLIENTS} client threads (httpx), gunicorn 3 workers + Celery worker --concurrency 4, "
        f"PostgreSQL and Redis on loopback, loopback test cluster; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"2 cores shared with other agents (load average at the end {load[0]:.1f}).",
        "",
        "| Case | raw: N submits over one SSH connection | raw p50 / p95 | portal: first request → last scheduler id "
        "| portal ÷ raw | submit request p50 / p95 | submit → scheduler id p50 / p95 |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for label, raw_total, raw_samples, p in rows:
        lines.append(
            f"| {label} | {raw_total:.2f} s | {_ms(raw_samples, 50)} / {_ms(raw_samples, 95)} | {p['total']:.2f} s "
            f"| ×{p['total'] / raw_total:.2f} | {_ms(p['request'], 50)} / {_ms(p['request'], 95)} "
            f"| {_ms(p['to_id'], 50)} / {_ms(p['to_id'], 95)} |"
        )
    lines += ["", "Requests alone (first sent → last answered): " + ", ".join(
        f"{label} {p['requests_total']:.2f} s" for label, _, _, p in rows) + ".",
        "", "SSH connections to the login node held by each Celery pool process afterwards (one account): " + "; ".join(
            f"{label} {p['ssh']}" for label, _, _, p in rows) + "."]
    if BULK:
        lines += ["", f"Bulk submit: the same {JOBS} jobs in one `POST /api/v1/jobs/batch/` (all or none), from the request "
                  "sent to the last scheduler id recorded, against the same raw submits:", "",
                  "| Case | raw | bulk: request → last scheduler id | bulk ÷ raw | the request alone | CPU: machine "
                  "| gunicorn | Celery worker | PostgreSQL |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for label, raw_total, _, p in rows:
            b, c = p["bulk"], p["bulk"]["cpu"]
            lines.append(f"| {label} | {raw_total:.2f} s | {b['total']:.2f} s | ×{b['total'] / raw_total:.2f} "
                         f"| {b['request']:.2f} s | {c['machine']:.1f} s | {c['web']:.1f} s | {c['worker']:.1f} s "
                         f"| {c['postgres']:.1f} s |")
    lines += ["", "CPU seconds spent while it ran (whole machine, other agents included; the daemons' own):", "",
              "| Case | raw: machine | portal: machine | gunicorn | Celery worker | PostgreSQL | bench's clients "
              "| rest (sshd, scheduler, Redis, others) |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for label, _, _, p in rows:
        c = p["cpu"]
        rest = c["machine"] - c["web"] - c["worker"] - c["postgres"] - c["bench"]
        lines.append(f"| {label} | {p['raw_cpu']:.1f} | {c['machine']:.1f} | {c['web']:.1f} | {c['worker']:.1f} "
                     f"| {c['postgres']:.1f} | {c['bench']:.1f} | {rest:.1f} |")
    def programs(cpu: dict) -> str:
        return ", ".join(f"{k.removeprefix('program:')} {v:.2f}" for k, v in cpu.items() if k.startswith("program:") and v >= 0.005)

    lines += ["", "Long-lived programs among them, CPU seconds (each `sbatch`/`qsub` process ends too soon to be read; "
              "the machine's total counts it): " + "; ".join(
                  f"{label}: raw {programs(p['raw_programs'])}; portal {programs(p['cpu'])}" for label, _, _, p in rows) + "."]
    lines += ["", f"The floor: {JOBS} `GET /api/v1/me/` (token, throttle, one small answer; nothing recorded or sent) by "
              f"the same {CLIENTS} clients, after each case:", "",
              "| After case | wall | request p50 / p95 | gunicorn CPU a request | machine CPU |", "| --- | --- | --- | --- | --- |"]
    for label, _, _, p in rows:
        f, c = p["floor"], p["floor_cpu"]
        lines.append(f"| {label} | {f['total']:.2f} s | {_ms(f['request'], 50)} / {_ms(f['request'], 95)} "
                     f"| {c['web'] / JOBS * 1000:.1f} ms | {c['machine']:.1f} s |")
    text = "\n".join(lines) + "\n"
    print(text)
    Path(os.environ.get("BENCH_OUT", ROOT / "bench" / "results-throughput.md")).write_text(text)
    return 0


def _cpu(daemons: list) -> dict[str, float]:
    """CPU seconds so far: the web server's processes, the Celery worker's, PostgreSQL's, and the whole machine (so
    the rest is sshd, the schedulers, Redis, the bench itself and whatever else runs)."""
    import psutil

    def tree(proc: subprocess.Popen) -> float:
        total = 0.0
        try:
            root = psutil.Process(proc.pid)
            for p in [root, *root.children(recursive=True)]:
                t = p.cpu_times()
                total += t.user + t.system + t.children_user + t.children_system
        except psutil.NoSuchProcess:
            pass
        return total

    # A backend per connection comes and goes: the postmaster's children_* hold those that ended.
    postgres = 0.0
    for p in psutil.process_iter(["name", "ppid"]):
        if p.info["name"] == "postgres":
            try:
                t = p.cpu_times()
                postgres += t.user + t.system
                if p.info["ppid"] == 1 or psutil.Process(p.info["ppid"]).name() != "postgres":
                    postgres += t.children_user + t.children_system
            except psutil.NoSuchProcess:
                pass
    machine = psutil.cpu_times()
    own = psutil.Process().cpu_times()  # the bench's client threads and its database polling
    others: dict[str, float] = {}  # the rest by program: sshd, the scheduler, Redis, munge...
    for p in psutil.process_iter(["name"]):
        if p.info["name"] in REST_PROGRAMS:
            try:
                t = p.cpu_times()
                others[p.info["name"]] = others.get(p.info["name"], 0.0) + t.user + t.system
            except psutil.NoSuchProcess:
                pass
    return {"web": tree(daemons[0]), "worker": tree(daemons[1]), "postgres": postgres, "bench": own.user + own.system,
            **{f"program:{name}": others.get(name, 0.0) for name in REST_PROGRAMS},
            "machine": machine.user + machine.system + machine.nice + getattr(machine, "softirq", 0)
            + getattr(machine, "irq", 0)}


# Long-lived programs among the rest (a process that ends between two readings, such as each `sbatch`, is missed:
# the machine's total still counts it).
REST_PROGRAMS = ("sshd", "slurmctld", "slurmd", "munged", "redis-server", "sge_qmaster")


def _ssh_connections(worker: subprocess.Popen, port: int) -> list[int]:
    """SSH connections to the login node each Celery pool process holds (goal 5: one per process and account)."""
    import psutil

    counts = []
    for child in psutil.Process(worker.pid).children(recursive=True):
        try:
            counts.append(sum(1 for c in child.net_connections("tcp")
                              if c.raddr and c.raddr.port == port and c.status == psutil.CONN_ESTABLISHED))
        except psutil.NoSuchProcess:
            pass
    return counts


def _ms(samples: list[float], p: float) -> str:
    return f"{percentile(samples, p) * 1000:.0f} ms"


def _exec(ssh, command: str) -> str:
    chan = ssh.get_transport().open_session()
    chan.exec_command(command)
    out = chan.makefile("rb").read()
    err = chan.makefile_stderr("rb").read()
    status = chan.recv_exit_status()
    chan.close()
    if status != 0:
        raise RuntimeError(f"{command!r} exited {status}: {err.decode()}")
    return out.decode()


def _post_all(secret: str, bodies: list[dict]) -> tuple[list[tuple[float, float, int]], float]:
    """POST every body from CLIENTS threads; (send time, answer time, job id) per body and the first send time."""
    import httpx

    results: list[tuple[float, float, int] | None] = [None] * len(bodies)
    next_index = iter(range(len(bodies)))
    lock = threading.Lock()
    failures: list[str] = []

    def client() -> None:
        with httpx.Client(base_url=f"http://127.0.0.1:{PORT}", timeout=60,
                          headers={"Authorization": f"Bearer {secret}"}) as http:
            while True:
                with lock:
                    i = next(next_index, None)
                if i is None:
                    return
                sent = time.time()
                response = http.post("/api/v1/jobs/", json=bodies[i])
                answered = time.time()
                if response.status_code != 201:
                    failures.append(f"{response.status_code} {response.text[:300]}")
                    continue
                results[i] = (sent, answered, response.json()["id"])

    threads = [threading.Thread(target=client) for _ in range(CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise RuntimeError(f"{len(failures)} submits failed, e.g. {failures[0]}")
    return results, min(r[0] for r in results)


def _wait_for_ids(job_ids: list[int], timeout: float = 600) -> None:
    from portal.jobs.models import Job

    deadline = time.monotonic() + timeout
    while Job.objects.filter(pk__in=job_ids, scheduler_id="").exists():
        if time.monotonic() > deadline:
            states = list(Job.objects.filter(pk__in=job_ids, scheduler_id="").values_list("state", "state_reason")[:5])
            raise RuntimeError(f"jobs without a scheduler id after {timeout} s: {states}")
        time.sleep(0.05)


def _warm(secret: str, hardware: str, project: str, count: int) -> None:
    """Jobs outside the measurement: every gunicorn and Celery process has imported everything and the Celery
    processes have opened their SSH connection (the raw side's connection is open too)."""
    from portal.clusters.connect import account_for, backend_for
    from portal.jobs.models import Job

    bodies = [{"project": project, "name": f"warm-{i}", "script": "sleep 300", "hardware": hardware,
               "walltime": "00:05:00"} for i in range(count)]
    results, _ = _post_all(secret, bodies)
    ids = [r[2] for r in results]
    _wait_for_ids(ids)
    jobs = list(Job.objects.filter(pk__in=ids).select_related("cluster", "user", "project"))
    backend = backend_for(jobs[0].cluster, account_for(jobs[0].cluster, jobs[0].user, jobs[0].project))
    for job in jobs:
        backend.cancel(job.scheduler_id)
    backend.close()


def _floor(secret: str) -> dict:
    """The cheapest authenticated API request, as many times as jobs were submitted: what any request costs."""
    import httpx

    samples: list[float] = []
    lock = threading.Lock()
    remaining = iter(range(JOBS))

    def client() -> None:
        with httpx.Client(base_url=f"http://127.0.0.1:{PORT}", timeout=60,
                          headers={"Authorization": f"Bearer {secret}"}) as http:
            while True:
                with lock:
                    if next(remaining, None) is None:
                        return
                sent = time.perf_counter()
                http.get("/api/v1/me/").raise_for_status()
                samples.append(time.perf_counter() - sent)

    start = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return {"total": time.perf_counter() - start, "request": samples}


def _bulk(secret: str, hardware: str, project: str, case: str) -> dict:
    """One bulk request of JOBS jobs: sent → answered, and sent → the last scheduler id recorded."""
    import httpx

    from portal.jobs.models import Job

    bodies = [{"project": project, "name": f"bulk-{case}-{i}", "script": "sleep 300", "hardware": hardware,
               "walltime": "00:05:00"} for i in range(JOBS)]
    with httpx.Client(base_url=f"http://127.0.0.1:{PORT}", timeout=600,
                      headers={"Authorization": f"Bearer {secret}"}) as http:
        sent = time.time()
        response = http.post("/api/v1/jobs/batch/", json={"jobs": bodies})
        answered = time.time()
    if response.status_code != 201:
        raise RuntimeError(f"bulk submit failed: {response.status_code} {response.text[:300]}")
    ids = [job["id"] for job in response.json()["jobs"]]
    _wait_for_ids(ids)
    last = max(Job.objects.filter(pk__in=ids).values_list("submitted_at", flat=True)).timestamp()
    return {"total": last - sent, "request": answered - sent,
            "ids": [i.split(".")[0] for i in Job.objects.filter(pk__in=ids).values_list("scheduler_id", flat=True)]}


def _portal(secret: str, hardware: str, project: str, case: str) -> dict:
    from portal.jobs.models import Job

    bodies = [{"project": project, "name": f"tp-{case}-{i}", "script": "sleep 300", "hardware": hardware,
               "walltime": "00:05:00"} for i in range(JOBS)]
    results, first = _post_all(secret, bodies)
    ids = [r[2] for r in results]
    _wait_for_ids(ids)
    recorded = dict(Job.objects.filter(pk__in=ids).values_list("pk", "submitted_at"))
    last = max(recorded.values()).timestamp()
    sent = {job_id: s for s, _, job_id in results}
    return {
        "total": last - first,
        "requests_total": max(r[1] for r in results) - first,
        "request": [a - s for s, a, _ in results],
        "to_id": [recorded[job_id].timestamp() - sent[job_id] for job_id in ids],
        "ids": [i.split(".")[0] for i in Job.objects.filter(pk__in=ids).values_list("scheduler_id", flat=True)],
    }


if __name__ == "__main__":
    raise SystemExit(main())
