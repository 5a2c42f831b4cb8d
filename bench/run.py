"""How much the portal adds on top of the raw scheduler command: ratios, not absolute timings.

Run with `make bench` (the loopback test cluster must be up; `make bench` starts it). For each scheduler:

- raw:      the scheduler's own submit command over one reused SSH connection (what a person's `ssh + sbatch`
            costs without the connection setup),
- backend:  `Backend.submit` — staging the job directory (tar over stdin) and submitting, same connection,
- portal:   the whole path after a web request: validate + render + record + reserve (PostgreSQL), then
            dispatch (lease, submit, compare-and-swap) — everything but the queue hop,
- web:      the web request alone (what a researcher waits for after Run): validate, render, record, enqueue.

and for status: one raw `squeue`/`qstat` for N jobs vs one tracking cycle (`track_cluster`) for the same N; and for
a sweep of N points: one raw array submit (`sbatch --array=1-N`, `qsub -t 1-N`) vs the portal's sweep submitted as
one array, and job by job.
Results are printed and written to bench/results.md (the README quotes them).
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
os.environ.setdefault("CELERY_TASK_ALWAYS_EAGER", "0")

REPEATS = int(os.environ.get("BENCH_REPEATS", "30"))
TRACK_JOBS = int(os.environ.get("BENCH_TRACK_JOBS", "100"))
SWEEP_POINTS = int(os.environ.get("BENCH_SWEEP_POINTS", "100"))
SWEEP_REPEATS = int(os.environ.get("BENCH_SWEEP_REPEATS", "3"))


def timed(fn, repeats: int = REPEATS) -> list[float]:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return samples


def ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def main() -> int:
    import django

    django.setup()
    from django.db import connection
    from django.test.utils import setup_test_environment

    setup_test_environment()
    db_name = connection.creation.create_test_db(verbosity=0, autoclobber=True)
    try:
        return _run(db_name)
    finally:
        from backends.transport import SSHTransport

        SSHTransport.close_all()
        connection.creation.destroy_test_db(db_name, verbosity=0)


def _run(db_name: str) -> int:
    from decimal import Decimal

    import portal.jobs.actions.submit as submit_actions
    import portal.jobs.tracking as job_tracking
    from portal.budgets.models import Budget
    from portal.catalog.models import HardwareType
    from portal.clusters.connect import account_for, backend_for
    from portal.dev.loopback import DEFAULT_STATE, link_researchers, register_clusters
    from portal.jobs.actions.dispatch import dispatch_job
    from portal.jobs.actions.submit import submit_job
    from portal.jobs.actions.sweeps import submit_sweep
    from portal.jobs.actions.validation import JobRequest
    from portal.jobs.models import Job
    from portal.jobs.specs import build_spec
    from portal.projects.models import Project

    project = Project.objects.create(slug="bench", name="Bench")
    Budget.objects.create(project=project, amount=Decimal("1000000"), unit="points", strict=True)
    clusters = register_clusters(DEFAULT_STATE, project)
    # alice (and bob) as `make cluster-up` links them: a portal-made key each, installed on the login node.
    user = link_researchers(clusters, project, verify=False)["alice"]
    # The bench measures the request path itself, not the broker: keep dispatch out of it.
    submit_actions.enqueue_on_commit = lambda *task: None

    rows = []
    cases = [
        ("Slurm", "slurm-a100x1", "sbatch --parsable --wrap true -o /dev/null -J raw -p gpu -A kkdemo -t 1 --gres=gpu:a100:1",
         f"sbatch --parsable --array=1-{SWEEP_POINTS} --wrap true -o /dev/null -J raw -p gpu -A kkdemo -t 1 "
         "--gres=gpu:a100:1"),
        ("Grid Engine (TSUBAME)", "tsubame-s-gpu", "qsub -terse -w e -g kkdemo -l s_gpu=1,h_rt=60 -o /dev/null -j y -b y true",
         f"qsub -terse -w e -g kkdemo -t 1-{SWEEP_POINTS} -l s_gpu=1,h_rt=60 -o /dev/null -j y -b y true"),
    ]
    for label, hw_slug, raw_command, _raw_array_command in cases:
        hardware = HardwareType.objects.get(slug=hw_slug)
        backend = backend_for(hardware.cluster, account_for(hardware.cluster, user, project))
        transport = backend.transport
        transport.run_shell("true")  # open the connection once; every case below reuses it
        raw = timed(lambda raw_command=raw_command, transport=transport: _ok(transport.run_shell(raw_command)))

        def request(name: str = "bench", hardware=hardware, script: str = "true"):
            return JobRequest(project=project, name=name, script=script, hardware=hardware,
                                          walltime="00:05:00")

        specs = [build_spec(submit_job(user, request()).job) for _ in range(REPEATS)]
        spec_iter = iter(specs)
        backend_samples = timed(lambda backend=backend, spec_iter=spec_iter: backend.submit(next(spec_iter)))

        def portal_path(request=request):
            job = submit_job(user, request()).job
            outcome = dispatch_job(job.pk)
            assert outcome.status == "submitted", outcome

        portal_samples = timed(portal_path)
        web_samples = timed(lambda request=request: submit_job(user, request()))
        rows.append((label, ms(raw), ms(backend_samples), ms(portal_samples), ms(web_samples)))

        # Tracking: N active jobs, one cycle, against one raw status command for the same ids.
        # Every earlier job of this cluster leaves the cycle, the web case's queued ones too: a dispatch takes
        # along the jobs queued for the same account (docs/decisions/0022), which would add them to the N.
        Job.objects.filter(cluster=hardware.cluster).update(state="cancelled")
        tracked = []
        for _ in range(TRACK_JOBS):
            job = submit_job(user, request(script="sleep 300")).job
            dispatch_job(job.pk)
            tracked.append(Job.objects.get(pk=job.pk))
        ids = [job.scheduler_id for job in tracked]
        raw_status = "squeue -h -t all -j " + ",".join(ids) if "Slurm" in label else "qstat -xml -u '*'"
        raw_track = timed(lambda raw_status=raw_status, transport=transport: _ok(transport.run_shell(raw_status)), 10)
        report = job_tracking.track_cluster(hardware.cluster.pk)
        assert report.queried == TRACK_JOBS and not report.error, report
        portal_track = timed(lambda cluster=hardware.cluster: job_tracking.track_cluster(cluster.pk), 10)
        rows.append((f"{label}: status of {TRACK_JOBS} jobs", ms(raw_track), None, ms(portal_track), None))
        for job_id in ids:
            backend.cancel(job_id)

    # Sweeps last: their thousands of short jobs load the machine, which would blur the single-job figures.
    for label, hw_slug, _raw_command, raw_array_command in cases:
        hardware = HardwareType.objects.get(slug=hw_slug)
        backend = backend_for(hardware.cluster, account_for(hardware.cluster, user, project))
        transport = backend.transport

        def request(name: str = "bench", hardware=hardware, script: str = "true"):
            return JobRequest(project=project, name=name, script=script, hardware=hardware,
                                          walltime="00:05:00")

        # A sweep of N points: one raw array submit against the portal's sweep, as one array and job by job.
        raw_array = []

        def raw_sweep(raw_array_command=raw_array_command, transport=transport, raw_array=raw_array):
            raw_array.append(_ok(transport.run_shell(raw_array_command)).stdout.strip().split(".")[0])

        raw_sweep_samples = timed(raw_sweep, SWEEP_REPEATS)
        points = {"SEED": list(range(SWEEP_POINTS))}

        def portal_sweep(array: bool, request=request, points=points):
            sweep = submit_sweep(user, request(name="sweep"), points, array=array)
            jobs = [submission.job.pk for submission in sweep.submissions]
            for job_id in jobs[:1] if array else jobs:
                # Job by job, a dispatch takes along the points still queued for the account (docs/decisions/0022):
                # the later points' own dispatches then find them submitted.
                assert dispatch_job(job_id).status in ("submitted", "skipped")
            assert not Job.objects.filter(pk__in=jobs, scheduler_id="").exists()
            return sweep

        as_array = timed(lambda: portal_sweep(True), SWEEP_REPEATS)
        web_sweep = timed(lambda request=request, points=points: submit_sweep(
            user, request(name="sweep"), points, array=True), SWEEP_REPEATS)
        one_by_one = timed(lambda: portal_sweep(False), SWEEP_REPEATS)
        rows.append((f"{label}: sweep of {SWEEP_POINTS}, one array", ms(raw_sweep_samples), None, ms(as_array),
                     ms(web_sweep)))
        rows.append((f"{label}: sweep of {SWEEP_POINTS}, job by job", ms(raw_sweep_samples), None, ms(one_by_one),
                     None))
        portal_ids = Job.objects.filter(cluster=hardware.cluster).exclude(scheduler_id="").values_list("scheduler_id",
                                                                                                      flat=True)
        for job_id in {*raw_array, *(i.split("_")[0].split(".")[0] for i in portal_ids)}:
            backend.cancel(job_id)

    lines = [
        f"Median of {REPEATS} runs (status: 10), one reused SSH connection, loopback test cluster, "
        f"{time.strftime('%Y-%m-%d')}.",
        "",
        "| Case | raw command | Backend.submit | portal (record + dispatch) | web request only |",
        "| --- | --- | --- | --- | --- |",
    ]
    for label, raw_ms, backend_ms, portal_ms, web_ms in rows:
        def cell(value, raw_ms=raw_ms):
            return "—" if value is None else f"{value:.1f} ms (×{value / raw_ms:.2f})"
        lines.append(f"| {label} | {raw_ms:.1f} ms | {cell(backend_ms)} | {cell(portal_ms)} | {cell(web_ms)} |")
    text = "\n".join(lines) + "\n"
    print(text)
    (ROOT / "bench" / "results.md").write_text(text)
    return 0


def _ok(result):
    if not result.ok:
        raise RuntimeError(result.message)
    return result


if __name__ == "__main__":
    raise SystemExit(main())
