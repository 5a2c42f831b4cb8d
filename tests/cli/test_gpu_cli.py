"""`kakehashi status ID` shows what a job's GPUs really do; `kakehashi keep ID --hours N` keeps an idle job."""

from __future__ import annotations

from pathlib import Path

import pytest

from backends.sampling import parse_samples
from portal.catalog.models import HardwareType
from portal.jobs.actions.submit import submit_job
from portal.jobs.actions.validation import JobRequest
from portal.jobs.models import Job, JobState
from portal.samples import series
from portal.samples.fetch import summary_of
from portal.samples.models import JobSamples

pytestmark = pytest.mark.django_db(transaction=True)

RECORDED = Path(__file__).parents[1] / "backends" / "fixtures" / "nvidia_smi" / "sampler-tsubame-sgenode01.log"


def test_status_shows_gpu_use_and_keep_keeps_the_job_running(logged_in, local_site, no_live_worker):
    # No live worker: its beat would fetch this job's samples (there are none on the local cluster for job "x") and
    # replace the recorded ones this test reads back.
    hardware = HardwareType.objects.create(cluster=local_site.cluster, slug="local-h100x2", name="Two H100",
                                           gpu_model="h100", gpus_per_node=2, cpus_per_node=2, max_nodes=1,
                                           rate="10", rate_unit="points")
    job = submit_job(local_site.alice, JobRequest(project=local_site.project, name="sampled", script="sleep 1",
                                                  hardware=hardware, walltime="00:10:00")).job
    Job.objects.filter(pk=job.pk).update(state=JobState.RUNNING, scheduler_id="x", started_at=job.created_at)
    job.refresh_from_db()
    data = series.add({}, parse_samples(RECORDED.read_text()))
    JobSamples.objects.create(job=job, series=data, summary=summary_of(job, data, 5.0, job.created_at),
                              state="idle", state_why="all 2 GPUs below 5 % for the whole window")

    status = logged_in("status", str(job.pk))
    assert status.code == 0, status.err
    assert "gpu use: idle  (all 2 GPUs below 5 % for the whole window)" in status.out
    assert "sgenode01/0 0.0%" in status.out and "idle rule: site rule" in status.out

    kept = logged_in("keep", str(job.pk), "--hours", "1.5")
    assert kept.code == 0, kept.err
    assert f"Job {job.pk} kept running until" in kept.out
    assert "kept: by alice until" in logged_in("status", str(job.pk)).out
    refused = logged_in("keep", str(job.pk), "--hours", "500")
    assert refused.code != 0 and "a keep is from 1 minute to 24 hours" in refused.err
