"""One tracking cycle at centre scale: 100, 1,000 and 10,000 active jobs on one Slurm and one Grid Engine cluster.

The jobs are synthesised in the (real, PostgreSQL) database, each with its reservation in the ledger; the
scheduler's answer is the scheduler's own text of the same size, parsed by the backend's real parsers: Slurm's
`squeue -h -r -t all -o '%i|%T|%r'` for the queue and `sacct -X -n -P` for those that left it; Grid Engine's
`qstat -xml -u '*'` and the `qacct -j` loop, built from the records in tests/backends/fixtures/sge/ (Son of Grid
Engine 8.1.9 on the test cluster) with only the job numbers changed. Half of the jobs go from
pending to running, a quarter completed, a quarter are gone (flagged lost). A second cycle then finds nothing new
(the steady state of a busy centre). Reported per cycle: scheduler queries, SQL statements, CPU seconds of this
process (the parse and the bookkeeping; PostgreSQL's own CPU is not in it) and wall time.

Run: `/work/main/.venv/bin/python bench/tracking.py` (BENCH_TRACK_SIZES="100,1000,10000",
BENCH_TRACK_KINDS="slurm,sge"). With
BENCH_CODE_ROOT=/path/to/another/checkout it measures that checkout's code (the "before" figures); a checkout
without `tracking.apply_answers` gets the old per-job loop of that checkout's track_cluster, unchanged.
Results are printed and written to bench/results-tracking.md (BENCH_OUT to write elsewhere).
"""

from __future__ import annotations

import os
import re
import sys
import time
from datetime import timedelta
from pathlib import Path

from bench.testdb import StatementCounter, in_test_database

ROOT = Path(__file__).resolve().parent.parent
CODE = Path(os.environ.get("BENCH_CODE_ROOT", ROOT))
sys.path.insert(0, str(CODE))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
os.environ.setdefault("CELERY_TASK_ALWAYS_EAGER", "0")

SIZES = [int(n) for n in os.environ.get("BENCH_TRACK_SIZES", "100,1000,10000").split(",")]
KINDS = os.environ.get("BENCH_TRACK_KINDS", "slurm,sge").split(",")
SGE_FIXTURES = ROOT / "tests" / "backends" / "fixtures" / "sge"


def main() -> int:
    return in_test_database(_run)


def _run() -> int:
    from decimal import Decimal

    from django.contrib.auth import get_user_model

    import portal.enqueue
    from portal.budgets.models import Budget
    from portal.catalog.models import HardwareType
    from portal.clusters.models import Allocation, Cluster, Kind
    from portal.projects.models import Membership, Project, Role

    # The endings ask for their outputs to be fetched: what the broker does with that is not tracking's cost.
    portal.enqueue.enqueue = lambda *task: None
    user = get_user_model().objects.create_user("alice", "alice@example.org", "x")
    project = Project.objects.create(slug="bench", name="Bench")
    Membership.objects.create(user=user, project=project, role=Role.OWNER)
    budget = Budget.objects.create(project=project, amount=Decimal("100000000"), unit="points", strict=True)
    rows = []
    for kind in KINDS:
        cluster = Cluster.objects.create(slug=f"big-{kind}", name=f"Big {kind}", kind=Kind(kind),
                                         login_host="127.0.0.1", host_keys="unused: the bench never logs in")
        hardware = HardwareType.objects.create(cluster=cluster, slug=f"a100-{kind}", name="A100", gpu_model="a100",
                                               gpus_per_node=1, cpus_per_node=8, max_nodes=4, rate=Decimal("0.5"),
                                               rate_unit="points")
        Allocation.objects.create(project=project, cluster=cluster, group="kkdemo")
        for size in SIZES:
            rows.append((kind, size, *_one_size(kind, size, cluster, hardware, project, user, budget)))

    _report(rows)
    return 0


def _one_size(kind, size, cluster, hardware, project, user, budget):
    from decimal import Decimal

    from django.utils import timezone

    from portal.budgets.models import LedgerEntry
    from portal.jobs.models import Job, JobState

    long_ago = timezone.now() - timedelta(hours=1)
    base = 1_000_000 * (SIZES.index(size) + 1) + (0 if kind == "slurm" else 100_000_000)
    jobs = Job.objects.bulk_create(
        Job(project=project, user=user, cluster=cluster, hardware=hardware, name=f"j{i}", walltime_seconds=3600,
            script="python train.py", rendered_script="#!/bin/bash\n" + "#SBATCH --x\n" * 20, state=JobState.PENDING,
            scheduler_id=str(base + i), scheduler_name=f"kh-{i}", submitted_at=long_ago, last_seen_at=long_ago,
            estimate_amount=Decimal("0.5"), estimate_unit="points")
        for i in range(size)
    )
    LedgerEntry.objects.bulk_create(
        LedgerEntry(budget=budget, job=job, kind=LedgerEntry.Kind.RESERVE, amount=Decimal("0.5"),
                    period_start=timezone.localdate().replace(year=2000, month=1, day=1))
        for job in jobs
    )
    text = _scheduler_text if kind == "slurm" else _sge_text
    queue, accounting = text(base, size)
    first = _cycle(cluster, queue, accounting)
    steady = _steady_squeue(base, size) if kind == "slurm" else _sge_text(base, size, steady=True)[0]
    second = _cycle(cluster, steady, "")
    states = dict.fromkeys(JobState.values, 0)
    for state in Job.objects.filter(pk__in=[job.pk for job in jobs]).values_list("state", flat=True):
        states[state] += 1
    Job.objects.filter(cluster=cluster).update(state=JobState.CANCELLED)  # the next size starts alone
    return first, second, states


def _report(rows) -> None:
    from portal.jobs.models import JobState

    lines = [
        f"One tracking cycle per cluster, code of {CODE.name}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        "2-core shared machine, PostgreSQL on loopback.",
        "First cycle: ½ pending→running, ¼ completed (settled), ¼ gone (lost). Second: nothing changed.",
        "",
        "| scheduler | active jobs | cycle | scheduler queries | SQL statements | CPU s (this process) | wall s |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for kind, size, first, second, states in rows:
        for label, (calls, sql, cpu, wall) in (("changes", first), ("steady", second)):
            lines.append(f"| {kind} | {size:,} | {label} | {calls} | {sql} | {cpu:.2f} | {wall:.2f} |")
        assert states[JobState.RUNNING] == size // 2 and states[JobState.COMPLETED] == size // 4, (kind, states)
    text = "\n".join(lines) + "\n"
    print(text)
    out = Path(os.environ.get("BENCH_OUT", ROOT / "bench" / "results-tracking.md"))
    out.write_text(text)


def _scheduler_text(base: int, size: int) -> tuple[str, str]:
    """Slurm's answers for `size` jobs: the queue (running, pending→running) and accounting (the completed)."""
    queue, accounting = [], []
    for i in range(size):
        job_id = base + i
        if i % 4 in (0, 1):
            queue.append(f"{job_id}|RUNNING|None")
        elif i % 4 == 2:
            queue.append(f"{job_id}|COMPLETED|None")
            accounting.append(f"{job_id}|kh-{i}|COMPLETED|0:0|1700000000|1700003000|3000|1|billing=8,cpu=8,gres/gpu=1,"
                              "mem=64G,node=1|kkdemo|gpu")
    return "\n".join(queue) + "\n", "\n".join(accounting) + "\n"


def _sge_text(base: int, size: int, steady: bool = False) -> tuple[str, str]:
    """Grid Engine's answers for `size` jobs, from records of the test cluster's SGE 8.1.9 with the numbers changed.

    The queue (`qstat -xml -u '*'`) lists the running half; the completed quarter is in the `qacct -j` loop's
    output, one record each; the last quarter is in neither (lost)."""
    xml = (SGE_FIXTURES / "qstat-xml.xml").read_text()
    running = xml[xml.index("<job_list", xml.index("<queue_info>")):]
    running = running[:running.index("</job_list>") + len("</job_list>")]
    record = (SGE_FIXTURES / "qacct-completed.txt").read_text()
    queue, accounting = [], []
    for i in range(size):
        job_id = str(base + i)
        if i % 4 in (0, 1):
            entry = re.sub(r"<JB_job_number>\d+</JB_job_number>", f"<JB_job_number>{job_id}</JB_job_number>", running)
            queue.append(re.sub(r"\s*<tasks>\d+</tasks>", "", entry))
        elif i % 4 == 2 and not steady:
            accounting.append(re.sub(r"(?m)^jobnumber\s+\d+", f"jobnumber    {job_id}", record))
    text = ("<?xml version='1.0'?>\n<job_info>\n  <queue_info>\n    " + "\n    ".join(queue)
            + "\n  </queue_info>\n  <job_info>\n  </job_info>\n</job_info>\n")
    return text, "".join(accounting)


def _steady_squeue(base: int, size: int) -> str:
    return "".join(f"{base + i}|RUNNING|None\n" for i in range(size) if i % 4 in (0, 1))


def _cycle(cluster, squeue: str, sacct: str) -> tuple[int, int, float, float]:
    """(scheduler queries, SQL statements, CPU s, wall s) of one cycle fed these answers."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from backends.transport import CommandResult
    from portal.clusters.connect import renderer_for
    from portal.jobs import tracking

    parser = renderer_for(cluster)
    counter = StatementCounter()
    cpu, wall = time.process_time(), time.perf_counter()
    with CaptureQueriesContext(connection) as ctx, connection.execute_wrapper(counter):
        jobs = _tracked(cluster)
        ids = [job.scheduler_id for job in jobs]
        statuses = parser.parse_statuses(CommandResult(0, squeue, ""), ids)
        calls = 1
        gone = [job.scheduler_id for job in jobs if job.scheduler_id not in statuses or statuses[job.scheduler_id].state.is_final]
        records = parser.parse_records(CommandResult(0, sacct, ""), gone) if gone else {}
        calls += 1 if gone else 0
        if hasattr(tracking, "apply_answers"):
            tracking.apply_answers(cluster, jobs, statuses, records, tracking.TrackReport())
        else:
            _old_loop(cluster, jobs, statuses, records)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    sql = counter.count  # not len(ctx.captured_queries): Django keeps only the last 9,000
    if os.environ.get("BENCH_SHOW_SQL"):
        for q in (sorted(ctx.captured_queries, key=lambda q: -float(q["time"]))[:5] if os.environ["BENCH_SHOW_SQL"] != "all" else ctx.captured_queries):
            print(f"  {q['time']} s  {q['sql'][:100]}")
    return calls, sql, cpu, wall


def _tracked(cluster):
    """The jobs track_cluster reads, by that checkout's own query."""
    from portal.jobs import tracking
    from portal.jobs.models import TRACKED_STATES, Job

    if hasattr(tracking, "tracked_jobs"):
        return tracking.tracked_jobs(cluster)
    return list(Job.objects.filter(cluster=cluster, state__in=TRACKED_STATES).exclude(scheduler_id="")
                .select_related("user", "project").order_by("pk"))


def _old_loop(cluster, jobs, statuses, records) -> None:
    """track_cluster's loop before issue 17 (commit 476f7fa), unchanged: a transaction per job that moves."""
    from django.utils import timezone

    from backends.base import JobRecord
    from portal.clusters.models import Cluster
    from portal.jobs import tracking, transitions

    now = timezone.now()
    Cluster.objects.filter(pk=cluster.pk).update(last_contact_at=now, last_error="")
    for job in jobs:
        status = statuses.get(job.scheduler_id)
        record_ = records.get(job.scheduler_id)
        if record_ is not None:
            tracking.finish_job(job.pk, record_)
        elif status is not None and status.state.is_final:
            tracking.finish_job(job.pk, JobRecord(job.scheduler_id, status.state, status.exit_code, reason=status.reason))
        elif status is not None:
            tracking.apply_status(job.pk, job.state, tracking._STATE_MAP[status.state], status.reason)
        else:
            tracking.flag_lost_if_silent(job.pk, now)
    transitions.update([job.pk for job in jobs if job.scheduler_id in statuses or job.scheduler_id in records],
                       stamp=False, last_seen_at=now)


if __name__ == "__main__":
    raise SystemExit(main())
