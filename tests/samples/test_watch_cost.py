"""What a sample-reading cycle costs the database: the same few statements for 3 running jobs or 30 (their rows
locked, made, judged and saved together), on the local cluster's real shell; bench/watch.py measures 1,000 on the
test Slurm cluster over SSH."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from bench.testdb import is_statement
from portal.catalog.models import HardwareType
from portal.jobs.models import Job, JobState
from portal.samples.fetch import watch_cluster
from portal.samples.models import JobSamples

pytestmark = pytest.mark.django_db
TRAINING = (Path(__file__).parents[1] / "backends/fixtures/nvidia_smi/a100-8x-training.csv").read_text().splitlines()


def node_file(node: str, start: int, count: int, header: bool = True) -> str:
    lines = [f"# kakehashi-sampler 1 node={node} interval=30 hz=100 page_kb=4 nvidia-smi=yes start={start}"] * header
    for t in range(start, start + 30 * count, 30):
        lines += [f"p {t} 4 {t} 8192000", *(f"g {t} {line}" for line in TRAINING)]
    return "\n".join(lines) + "\n"


def running_jobs(site, hardware, count: int, prefix: str) -> list[Job]:
    now = timezone.now()
    start = int(now.timestamp()) - 300
    jobs = Job.objects.bulk_create([
        Job(project=site.project, user=site.alice, cluster=site.cluster, hardware=hardware, name=f"{prefix}{i}",
            nodes=2, walltime_seconds=3600, script="true", state=JobState.RUNNING, scheduler_id=f"{prefix}{i}",
            remote_dir=f"{prefix}{i}", started_at=now, estimate_amount=Decimal("6"), estimate_unit="points")
        for i in range(count)])
    for job in jobs:
        directory = Path(site.cluster.options["root"]) / job.remote_dir / "kakehashi-samples"
        directory.mkdir(parents=True)
        for node in ("node01", "node02"):
            (directory / f"{node}.log").write_text(node_file(node, start, 10))
    return jobs


def statements_of_a_cycle(cluster_id: int) -> int:
    with CaptureQueriesContext(connection) as captured:
        report = watch_cluster(cluster_id)
    assert not report.errors and report.round_trips == 1
    return sum(1 for q in captured.captured_queries if is_statement(q["sql"]))


def test_a_sample_reading_cycle_costs_the_same_statements_for_3_running_jobs_or_30(local_site):
    hardware = HardwareType.objects.create(cluster=local_site.cluster, slug="a100x8", name="A100 node",
                                           gpu_model="a100", gpus_per_node=8, max_nodes=2, rate=Decimal("3"))
    few = running_jobs(local_site, hardware, 3, "few")
    first_few = statements_of_a_cycle(local_site.cluster.pk)
    steady_few = statements_of_a_cycle(local_site.cluster.pk)
    Job.objects.filter(pk__in=[job.pk for job in few]).update(state=JobState.COMPLETED, ended_at=timezone.now())
    JobSamples.objects.filter(job__in=few).update(complete=True)
    running_jobs(local_site, hardware, 30, "many")
    assert statements_of_a_cycle(local_site.cluster.pk) == first_few
    assert statements_of_a_cycle(local_site.cluster.pk) == steady_few
    read = JobSamples.objects.filter(job__name__startswith="many")
    assert read.count() == 30 and all(len(s.series["gpus"]) == 16 and s.summary["gpus"] for s in read)  # 2 × 8 GPUs
