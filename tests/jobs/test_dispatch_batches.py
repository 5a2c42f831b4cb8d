"""One dispatch takes along the jobs queued for the same account, each still submitted exactly once.

docs/decisions/0022: the jobs are leased together, submitted over channels of one SSH connection and recorded
together; a job's own task that comes later finds it handed over already.
"""

from __future__ import annotations

import pytest

from portal.catalog.models import HardwareType
from portal.clusters.connect import account_for, backend_for
from portal.jobs.actions import submit as submit_actions
from portal.jobs.actions.dispatch import dispatch_job
from portal.jobs.actions.submit import submit_job
from portal.jobs.actions.validation import JobRequest
from portal.jobs.models import Job, JobEvent, JobState

pytestmark = [pytest.mark.cluster, pytest.mark.django_db(transaction=True)]


def _submit(site, hardware, name: str) -> Job:
    return submit_job(site.alice, JobRequest(
        project=site.project, name=name, script="sleep 60", hardware=hardware, walltime="00:05:00")).job


def test_jobs_queued_for_one_account_reach_the_scheduler_together_each_once(hpc_site, monkeypatch):
    monkeypatch.setattr(submit_actions, "enqueue_on_commit", lambda *task: None)  # dispatched here only
    a100 = HardwareType.objects.get(slug="slurm-a100x1")
    jobs = [_submit(hpc_site, a100, f"batch-{i}") for i in range(6)]
    other_cluster = _submit(hpc_site, hpc_site.hardware, "local-stays")

    assert dispatch_job(jobs[0].pk).status == "submitted"

    batch = list(Job.objects.filter(pk__in=[job.pk for job in jobs]).order_by("pk"))
    assert {job.state for job in batch} == {JobState.PENDING}
    assert len({job.scheduler_id for job in batch}) == 6
    for job in batch:
        assert list(JobEvent.objects.filter(job=job).values_list("to_state", flat=True)) == [
            "queued", "submitting", "pending"]
        assert job.state_reason == f"scheduler id {job.scheduler_id}"
    assert Job.objects.get(pk=other_cluster.pk).state == JobState.QUEUED  # another cluster's job waits for its own

    # Each job's own dispatch, when it comes, submits nothing more.
    assert {dispatch_job(job.pk).status for job in jobs[1:]} == {"skipped"}
    backend = backend_for(jobs[0].cluster, account_for(jobs[0].cluster, hpc_site.alice, hpc_site.project))
    for job in batch:
        named = backend.transport.run(["squeue", "-h", "-t", "all", "-n", job.scheduler_name, "-o", "%i"]).stdout.split()
        assert named == [job.scheduler_id]
        backend.cancel(job.scheduler_id)


def test_a_refused_job_in_a_batch_fails_alone(hpc_site, monkeypatch):
    monkeypatch.setattr(submit_actions, "enqueue_on_commit", lambda *task: None)
    a100 = HardwareType.objects.get(slug="slurm-a100x1")
    jobs = [_submit(hpc_site, a100, f"mixed-{i}") for i in range(3)]
    # As if the scheduler's partition had gone away after the job was recorded: sbatch refuses that one job.
    refused = jobs[1]
    Job.objects.filter(pk=refused.pk).update(  # the job's own script (the column `rendered_script`)
        own_script=refused.rendered_script.replace("--partition=gpu", "--partition=nosuchpartition"))

    dispatch_job(jobs[0].pk)

    states = dict(Job.objects.filter(pk__in=[job.pk for job in jobs]).values_list("pk", "state"))
    assert states == {jobs[0].pk: JobState.PENDING, refused.pk: JobState.FAILED, jobs[2].pk: JobState.PENDING}
    failed = Job.objects.get(pk=refused.pk)
    assert "the scheduler refused the job" in failed.state_reason and not failed.scheduler_id
    assert failed.ledger.filter(kind="release").exists()  # its reservation is given back
    backend = backend_for(jobs[0].cluster, account_for(jobs[0].cluster, hpc_site.alice, hpc_site.project))
    for job in Job.objects.filter(pk__in=[jobs[0].pk, jobs[2].pk]):
        backend.cancel(job.scheduler_id)
