"""What the AWS Batch backend adds on top of the raw AWS calls, against the same moto server: ratios, not timings.

Run with `make bench` (after bench/run.py) or `python -m bench.cloud`. It starts moto's server (Batch, S3, Logs)
in this process, sets a queue up with `cloud_setup`'s code, and measures:

- submit:  one raw `submit_job` of an already registered job definition, against `AWSBatchBackend.submit` (the job
           directory put in the bucket, a job definition revision registered, submit_job, the id recorded: four
           requests, each a moto round trip here and a regional AWS round trip in production),
- status:  one raw `describe_jobs` of 100 ids against `statuses` of the same 100 (the same one call, parsed),
- records: `final_records` right after `statuses`, which reuses the same answer (no call).

Moto answers on loopback in a thread of this process, so the absolute figures say little about AWS (where a
request takes tens of milliseconds); the ratios show the backend's own cost. Results are printed and written to
bench/results-cloud.md (the README quotes them).
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

REPEATS = int(os.environ.get("BENCH_REPEATS", "30"))
STATUS_JOBS = 100


def median_ms(fn, repeats: int = REPEATS) -> float:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def main() -> int:
    from backends import aws_batch_setup as setup
    from backends.aws_batch import AWSBatchBackend
    from backends.base import Access, JobSpec, Resources
    from tests.moto_aws import MotoAWS

    aws = MotoAWS.start()
    try:
        s3 = aws.client("s3")
        s3.create_bucket(Bucket="bench-jobs", CreateBucketConfiguration={"LocationConstraint": aws.region})
        settings = {"region": aws.region, "endpoint_url": aws.endpoint, "bucket": "bench-jobs", "cluster": "bench",
                    **aws.network()}
        backend = AWSBatchBackend.connect(Access(key_id="bench", secret="bench"), settings)
        setup.ensure(backend.aws.batch, setup.site_plan(settings, [("p4d.24xlarge", "on-demand", 192)]))
        queue = "kakehashi-bench-p4d-24xlarge-on-demand"
        counter = iter(range(1_000_000))

        def spec() -> JobSpec:
            name = f"kh-bench{next(counter):06d}"
            return JobSpec(name=name, payload="echo hi\n", walltime_seconds=3600, workdir=f"kakehashi-jobs/{name}",
                           container="docker://nvcr.io/nvidia/pytorch:24.05-py3",
                           resources=Resources(gpus_per_node=8, cpus_per_node=96, memory_gb=1000,
                                               mapping={"instance_type": "p4d.24xlarge"}))

        raw_submit = median_ms(lambda: backend.aws.batch.submit_job(jobName="raw", jobQueue=queue, jobDefinition=queue))
        backend_submit = median_ms(lambda: backend.submit(spec()))
        ids = [backend.submit(spec()) for _ in range(STATUS_JOBS)]
        raw_status = median_ms(lambda: backend.aws.batch.describe_jobs(jobs=ids), repeats=10)
        fresh = lambda: AWSBatchBackend(backend.aws, settings)  # noqa: E731 - a tracking cycle's own backend
        backend_status = median_ms(lambda: fresh().statuses(ids), repeats=10)

        def cycle():
            cycle_backend = fresh()
            cycle_backend.statuses(ids)
            cycle_backend.final_records(ids)

        backend_cycle = median_ms(cycle, repeats=10)
    finally:
        aws.stop()
    rows = [
        ("AWS Batch submit", raw_submit, backend_submit),
        (f"AWS Batch: status of {STATUS_JOBS} jobs", raw_status, backend_status),
        (f"AWS Batch: status and final records of {STATUS_JOBS} ended jobs", raw_status, backend_cycle),
    ]
    lines = [f"Median of {REPEATS} runs (status: 10), moto {_version('moto')} on loopback in the benchmark's process, "
             f"{date.today():%Y-%m-%d}:", "", "| Case | raw AWS call | backend |", "| --- | --- | --- |"]
    lines += [f"| {case} | {raw:.1f} ms | {ours:.1f} ms (×{ours / raw:.2f}) |" for case, raw, ours in rows]
    text = "\n".join(lines) + "\n"
    print(text)
    (ROOT / "bench" / "results-cloud.md").write_text(text)
    return 0


def _version(package: str) -> str:
    from importlib.metadata import version

    return version(package)


if __name__ == "__main__":
    sys.exit(main())
