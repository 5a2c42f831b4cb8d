"""The portal's own bookkeeping on the submit path: SQL statements per job, and a 1,000-point sweep's web request.

- statements: one job submitted and dispatched on the local cluster (real runner), counted with
  CaptureQueriesContext, transaction brackets (BEGIN/COMMIT/savepoints) not counted;
- sweep: `submit_sweep` of 1,000 points on a Slurm cluster, as one array and job by job — what the web request
  does (validate, render, record 1,000 jobs with their events and reservations, enqueue); the broker is left out.
  Sweeps are capped at MAX_SWEEP_JOBS (100) for people; the bench lifts the cap to measure centre scale.

Run: `/work/main/.venv/bin/python bench/bookkeeping.py`; BENCH_CODE_ROOT=/other/checkout measures that code
(the "before" figures). Writes bench/results-bookkeeping.md (BENCH_OUT to write elsewhere).
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

from bench.testdb import in_test_database, is_statement

ROOT = Path(__file__).resolve().parent.parent
CODE = Path(os.environ.get("BENCH_CODE_ROOT", ROOT))
sys.path.insert(0, str(CODE))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
os.environ.setdefault("CELERY_TASK_ALWAYS_EAGER", "0")

POINTS = int(os.environ.get("BENCH_SWEEP_POINTS", "1000"))
REPEATS = int(os.environ.get("BENCH_REPEATS", "5"))


def main() -> int:
    return in_test_database(_run)


def _count(ctx) -> int:
    return sum(1 for q in ctx.captured_queries if is_statement(q["sql"]))


def _run() -> int:
    import tempfile
    from decimal import Decimal

    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    import portal.jobs.actions.submit as submit_actions
    import portal.jobs.actions.sweeps as sweep_actions
    from portal.budgets.models import Budget
    from portal.catalog.models import HardwareType
    from portal.clusters.actions import generate_key_pair
    from portal.clusters.models import Allocation, Cluster, ClusterAccount, Kind
    from portal.jobs.actions.dispatch import dispatch_job
    from portal.jobs.actions.submit import submit_job
    from portal.jobs.actions.sweeps import submit_sweep
    from portal.jobs.actions.validation import JobRequest
    from portal.projects.models import Membership, Project, Role

    submit_actions.enqueue_on_commit = lambda *task: None  # the request path itself, not the broker
    sweep_actions.MAX_SWEEP_JOBS = POINTS
    settings.KAKEHASHI_LOCAL_JOBS_DIR = tempfile.mkdtemp(prefix="kakehashi-bench-")
    user = get_user_model().objects.create_user("alice", "alice@example.org", "x")
    project = Project.objects.create(slug="bench", name="Bench")
    Membership.objects.create(user=user, project=project, role=Role.OWNER)
    Budget.objects.create(project=project, amount=Decimal("100000000"), unit="points", strict=True)
    local = Cluster.objects.create(slug="local", name="Local", kind=Kind.LOCAL,
                                   options={"root": settings.KAKEHASHI_LOCAL_JOBS_DIR})
    cpu = HardwareType.objects.create(cluster=local, slug="cpu", name="CPU", cpus_per_node=1, max_nodes=1,
                                      rate=Decimal("1"), rate_unit="points")
    slurm = Cluster.objects.create(slug="slurm", name="Slurm", kind=Kind.SLURM, login_host="127.0.0.1",
                                   host_keys="unused: nothing here logs in")
    a100 = HardwareType.objects.create(cluster=slurm, slug="a100", name="A100", gpu_model="a100", gpus_per_node=1,
                                       cpus_per_node=8, max_nodes=1, rate=Decimal("0.5"), rate_unit="points",
                                       scheduler_mapping={"partition": "gpu", "gres": "gpu:a100:1"})
    for cluster in (local, slurm):
        Allocation.objects.create(project=project, cluster=cluster, group="kkdemo")
    private, public = generate_key_pair("kakehashi-bench")
    account = ClusterAccount(cluster=slurm, user=user, username="alice", public_key=public)
    account.set_private_key(private)
    account.save()

    def request(hardware, name="bench"):
        return JobRequest(project=project, name=name, script="python train.py --seed $SEED\n",
                                  hardware=hardware, walltime="01:00:00")

    dispatch_job(submit_job(user, request(cpu)).job.pk)  # warm
    submits, dispatches = [], []
    for _ in range(REPEATS):
        with CaptureQueriesContext(connection) as ctx:
            job = submit_job(user, request(cpu)).job
        submits.append(_count(ctx))
        with CaptureQueriesContext(connection) as ctx:
            outcome = dispatch_job(job.pk)
        assert outcome.status == "submitted", outcome
        dispatches.append(_count(ctx))

    points = {"SEED": list(range(POINTS))}
    rows = []
    for label, array in (("one array", True), ("job by job", False)):
        samples, statements = [], 0
        for _ in range(3):
            start = time.perf_counter()
            with CaptureQueriesContext(connection) as ctx:
                submit_sweep(user, request(a100, "sweep"), points, array=array)
            samples.append(time.perf_counter() - start)
            statements = _count(ctx)
        rows.append((label, statistics.median(samples), statements))

    lines = [
        f"Code of {CODE.name}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, 2-core shared machine, "
        "PostgreSQL on loopback.",
        "",
        "| What | SQL statements | time |",
        "| --- | --- | --- |",
        f"| one job: submit (web request) | {statistics.median(submits):.0f} | — |",
        f"| one job: dispatch (worker, local runner) | {statistics.median(dispatches):.0f} | — |",
        f"| one job: submit + dispatch | {statistics.median(submits) + statistics.median(dispatches):.0f} | — |",
    ]
    for label, seconds, statements in rows:
        lines.append(f"| sweep of {POINTS:,} points, {label}: web request | {statements} | {seconds:.2f} s |")
    text = "\n".join(lines) + "\n"
    print(text)
    Path(os.environ.get("BENCH_OUT", ROOT / "bench" / "results-bookkeeping.md")).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
