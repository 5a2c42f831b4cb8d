"""Which clusters the sample reader visits: those running jobs, and those whose jobs ended lately with samples still
to read (even with nothing left to track); never for long-finished jobs."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from portal.jobs.actions.submit import submit_job
from portal.jobs.actions.validation import JobRequest
from portal.jobs.models import Job, JobState
from portal.samples.fetch import clusters_to_watch
from portal.samples.models import JobSamples

pytestmark = pytest.mark.django_db


def test_the_reader_visits_clusters_with_running_jobs_or_samples_still_to_read(local_site):
    job = submit_job(local_site.alice, JobRequest(project=local_site.project, name="w", script="true",
                                                  hardware=local_site.hardware, walltime="00:05:00")).job
    assert clusters_to_watch() == []
    Job.objects.filter(pk=job.pk).update(state=JobState.RUNNING, scheduler_id="x")
    assert clusters_to_watch() == [local_site.cluster.pk]
    samples = JobSamples.objects.create(job=job)
    Job.objects.filter(pk=job.pk).update(state=JobState.COMPLETED, ended_at=timezone.now() - timedelta(minutes=5))
    assert clusters_to_watch() == [local_site.cluster.pk]  # its last samples are still to read
    JobSamples.objects.filter(pk=samples.pk).update(complete=True)
    assert clusters_to_watch() == []
    JobSamples.objects.filter(pk=samples.pk).update(complete=False)
    Job.objects.filter(pk=job.pk).update(ended_at=timezone.now() - timedelta(hours=2))
    assert clusters_to_watch() == []  # ended long ago: left


def test_a_running_job_without_samples_says_so_and_is_never_idle(local_site):
    from portal.samples.fetch import record

    job = submit_job(local_site.alice, JobRequest(project=local_site.project, name="quiet", script="true",
                                                  hardware=local_site.hardware, walltime="00:05:00")).job
    Job.objects.filter(pk=job.pk).update(state=JobState.RUNNING, scheduler_id="x",
                                         started_at=timezone.now() - timedelta(minutes=10))
    job.refresh_from_db()
    record(job, {})
    samples = JobSamples.objects.get(job=job)
    assert samples.state == "exempt"  # local-cpu reserves no GPU
    from portal.catalog.models import HardwareType

    gpu = HardwareType.objects.create(cluster=local_site.cluster, slug="g", name="GPU", gpus_per_node=1, max_nodes=1)
    Job.objects.filter(pk=job.pk).update(hardware=gpu)
    record(Job.objects.select_related("hardware", "user", "project").get(pk=job.pk), {})
    samples.refresh_from_db()
    assert samples.state == "unknown" and "the sampler is missing, was switched off" in samples.state_why
