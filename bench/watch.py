"""The tracking cycle with samples at centre scale: 1,000 running 2-node jobs (8 GPUs a node) on the loopback test
Slurm cluster, against the same cycle without samples.

What is real: the 1,000 jobs' rows in PostgreSQL (a fresh test database); their job directories on the test
cluster's Slurm login node, in alice's home, each with the two node files the sampler writes
(`kakehashi-samples/node01.log`, `node02.log`, in the sampler's format with a recorded 8×A100 nvidia-smi answer);
the portal's SSH backend (paramiko, the pinned host key, alice's portal-made key) reading every new line of them
in one command; `portal.samples.fetch.watch_cluster` as the beat runs it (series, summary, the idle rule, saved).
What is not: the 1,000 jobs are not in Slurm's queue (two loopback nodes shared with other runs cannot hold 1,000
running 2-node jobs), so the tracker's half of the cycle is fed Slurm's own `squeue` text for 1,000 running jobs,
parsed by the real parser and applied by the real `tracking.apply_answers` (as bench/tracking.py does), and the
node files are written by this bench, not by 2,000 samplers.

Cycles: the tracker alone (without samples); a first samples cycle (10 samples a node: a job's first read); the
steady cycle (one new sample a node: the sample interval's worth); a cycle with nothing new. Per cycle: scheduler
round trips (commands sent over SSH, counted at the transport), SQL statements, CPU ms of this process (PostgreSQL's
and the login node's own CPU are not in it) and wall ms; and what samples weigh per job-day.

Run: `python -m bench.watch` (BENCH_WATCH_JOBS=1000; the test cluster up: `make cluster-up`). Writes
bench/results-watch.md (BENCH_OUT to write elsewhere).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from bench.testdb import StatementCounter, in_test_database

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
os.environ.setdefault("CELERY_TASK_ALWAYS_EAGER", "0")
JOBS = int(os.environ.get("BENCH_WATCH_JOBS", "1000"))
NODES = ("node01", "node02")
INTERVAL = 30
LINE = (ROOT / "tests/backends/fixtures/nvidia_smi/a100-8x-training.csv").read_text().splitlines()


def _samples(node: str, start: int, count: int, header: bool) -> str:
    lines = [f"# kakehashi-sampler 1 node={node} interval={INTERVAL} hz=100 page_kb=4 nvidia-smi=yes start={start}"] \
        if header else []
    for i in range(count):
        t = start + INTERVAL * i
        lines.append(f"p {t} 12 {t * 8} 81920000")
        lines += [f"g {t} {line}" for line in LINE]
    return "\n".join(lines) + "\n"


def _round_trips():
    """Count the commands the portal sends over SSH (the transport's one door)."""
    from backends.transport import SSHTransport

    sent = {"n": 0}
    original = SSHTransport.run_shell

    def run_shell(self, command, *, stdin=None, timeout=None):
        sent["n"] += 1
        return original(self, command, stdin=stdin, timeout=timeout)

    SSHTransport.run_shell = run_shell
    return sent


def _measure(work) -> tuple[int, float, float, object]:
    from django.db import connection

    counter = StatementCounter()
    cpu, wall = time.process_time(), time.perf_counter()
    with connection.execute_wrapper(counter):
        result = work()
    return counter.count, (time.process_time() - cpu) * 1000, (time.perf_counter() - wall) * 1000, result


def _run() -> int:
    from decimal import Decimal

    from django.utils import timezone

    from bench.tracking import _cycle
    from portal.clusters.connect import account_for, backend_for
    from portal.dev.loopback import DEFAULT_STATE, link_researchers, register_clusters
    from portal.jobs.models import Job, JobState
    from portal.projects.models import Project
    from portal.samples.fetch import watch_cluster

    project = Project.objects.create(slug="bench", name="Bench")
    clusters = register_clusters(DEFAULT_STATE, project)
    user = link_researchers({"slurm-test": clusters["slurm-test"]}, project, verify=False)["alice"]
    cluster = clusters["slurm-test"]
    hardware = cluster.hardware.get(slug="slurm-a100x8")  # 8 GPUs a node, 2 nodes at most
    backend = backend_for(cluster, account_for(cluster, user, project))
    sent = _round_trips()
    base = f"kakehashi-jobs/bench-watch-{os.getpid()}"
    now = timezone.now()
    start = int(now.timestamp()) - 600
    jobs = Job.objects.bulk_create([
        Job(project=project, user=user, cluster=cluster, hardware=hardware, name=f"j{i}", nodes=2,
            walltime_seconds=86400, script="python train.py", state=JobState.RUNNING, scheduler_id=str(9_000_000 + i),
            scheduler_name=f"kh-{i}", remote_dir=f"{base}/j{i}", submitted_at=now, started_at=now, last_seen_at=now,
            estimate_amount=Decimal("144"), estimate_unit="points") for i in range(JOBS)])

    def on_the_login_node(script: str, stdin: str = "") -> None:
        result = backend.run(script, stdin=stdin.encode(), timeout=600)
        assert result.ok, result.message

    # The node files as 2,000 samplers would have left them: 10 samples each (5 minutes at 30 s).
    first = "".join(f"=={node}\n" + _samples(node, start, 10, True) for node in NODES)
    on_the_login_node(
        f"set -e; mkdir -p {base}/t; awk '/^==/ {{ f = \"{base}/t/\" substr($0, 3) \".log\"; next }} {{ print > f }}'; "
        f"i=0; while [ $i -lt {JOBS} ]; do d={base}/j$i/kakehashi-samples; mkdir -p $d; "
        + "; ".join(f"cp {base}/t/{node}.log $d/{node}.log" for node in NODES) + "; i=$((i + 1)); done", first)
    squeue = "".join(f"{job.scheduler_id}|RUNNING|None\n" for job in jobs)

    rows = []
    try:
        sent["n"] = 0
        calls, sql, cpu, wall = _cycle(cluster, squeue, "")  # the tracker: squeue's answer, parsed and applied
        tracker = (calls, sql, cpu * 1000, wall * 1000)
        rows.append(("tracker alone (no samples)", tracker, None))
        for label, append in (("samples: first read (10 a node)", 0), ("samples: steady (1 new a node)", 1),
                              ("samples: nothing new", 0)):
            if append:
                more = "".join(f"=={node}\n" + _samples(node, start + 300, 1, False) for node in NODES)
                on_the_login_node(
                    f"set -e; awk '/^==/ {{ f = \"{base}/t/new-\" substr($0, 3) \".log\"; next }} {{ print > f }}'; "
                    f"i=0; while [ $i -lt {JOBS} ]; do d={base}/j$i/kakehashi-samples; "
                    + "; ".join(f"cat {base}/t/new-{node}.log >> $d/{node}.log" for node in NODES)
                    + "; i=$((i + 1)); done", more)
            if os.environ.get("BENCH_PROFILE") and append:
                import cProfile
                import pstats

                profile = cProfile.Profile()
                profile.runcall(watch_cluster, cluster.pk)
                pstats.Stats(profile).sort_stats("cumulative").print_stats(35)
                on_the_login_node(f"i=0; while [ $i -lt {JOBS} ]; do d={base}/j$i/kakehashi-samples; "
                                  + "; ".join(f"cat {base}/t/new-{node}.log >> $d/{node}.log" for node in NODES)
                                  + "; i=$((i + 1)); done")
            sent["n"] = 0
            sql, cpu, wall, report = _measure(lambda: watch_cluster(cluster.pk))
            assert not report.errors and report.jobs == JOBS, report
            rows.append((label, (sent["n"], sql, cpu, wall), report))
        # The same steady cycle once the jobs have run for a day: each series at its bound (720 points a GPU).
        from portal.samples.models import JobSamples

        now_s = int(time.time())
        JobSamples.objects.filter(job__in=jobs).update(series=_job_day(end=now_s)["data"])
        more = "".join(f"=={node}\n" + _samples(node, now_s, 1, False) for node in NODES)
        on_the_login_node(
            f"set -e; awk '/^==/ {{ f = \"{base}/t/day-\" substr($0, 3) \".log\"; next }} {{ print > f }}'; "
            f"i=0; while [ $i -lt {JOBS} ]; do d={base}/j$i/kakehashi-samples; "
            + "; ".join(f"cat {base}/t/day-{node}.log >> $d/{node}.log" for node in NODES)
            + "; i=$((i + 1)); done", more)
        sent["n"] = 0
        sql, cpu, wall, report = _measure(lambda: watch_cluster(cluster.pk))
        assert not report.errors and report.jobs == JOBS, report
        rows.append(("samples: steady, each series a day old", (sent["n"], sql, cpu, wall), report))
    finally:
        on_the_login_node(f"rm -rf {base}")

    day = _job_day()
    lines = ["# The tracking cycle with samples", "",
             f"`python -m bench.watch`, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average "
             f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} cores: {JOBS:,} running 2-node jobs (8 GPUs a node) on "
             "the test Slurm cluster, their node files on its login node read over SSH; PostgreSQL on loopback.", "",
             "| Cycle | Round trips | SQL statements | per job | CPU ms | wall ms | bytes read |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for label, (trips, sql, cpu, wall), report in rows:
        lines.append(f"| {label} | {trips} | {sql:,} | {sql / JOBS:.3f} | {cpu:,.0f} | {wall:,.0f} | "
                     f"{f'{report.bytes:,}' if report else '—'} |")
    for label, (trips, sql, cpu, _), _ in rows[2::2]:
        lines.append("")
        lines.append(f"A cycle with samples ({label.removeprefix('samples: ')}): {tracker[0] + trips} round trips, "
                     f"{tracker[1] + sql:,} SQL statements, {tracker[2] + cpu:,.0f} ms of CPU; without samples: "
                     f"{tracker[0]}, {tracker[1]:,}, {tracker[2]:,.0f} ms.")
    lines += ["",
              "| What samples weigh, per 2-node job-day (8 GPUs a node, 30 s) | Bytes |", "| --- | --- |",
              f"| the sampler's files on the cluster, read once over SSH | {day['files']:,} |",
              f"| the portal's series (JobSamples.series, JSON) after a day | {day['series']:,} |",
              f"| its summary (JobSamples.summary) | {day['summary']:,} |", ""]
    text = "\n".join(lines)
    out = Path(os.environ.get("BENCH_OUT", ROOT / "bench" / "results-watch.md"))
    out.write_text(text)
    print(text)
    return 0


def _job_day(end: int = 1_700_086_400) -> dict:
    """A day of one 2-node job's samples up to `end`: the node files' bytes, and the series the portal keeps."""
    from backends.sampling import parse_samples
    from portal.samples import series

    per_day = 86400 // INTERVAL
    start = end - 86400
    data: dict = {}
    files = 0
    for node in NODES:
        text = _samples(node, start, per_day, True)
        files += len(text.encode())
        for chunk in range(0, per_day, 120):  # read an hour at a time, as the cycles would
            lines = text.splitlines(keepends=True)
            part = (lines[:1] if chunk == 0 else []) + lines[1 + chunk * 9:1 + (chunk + 120) * 9]
            data = series.add(data, parse_samples("".join(part)), node_hint=node)
    summary = series.summarise(data, threshold=5, reserved_gpu_hours=16 * 24, rate_per_gpu_hour=0.375,
                               unit="points").as_dict()
    return {"files": files, "series": len(json.dumps(data).encode()), "summary": len(json.dumps(summary).encode()),
            "data": data}


if __name__ == "__main__":
    raise SystemExit(in_test_database(_run))
