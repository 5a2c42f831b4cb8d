"""A login node that answers slowly holds only its share of the workers: other clusters' jobs are not held up.

A real worker (two processes, its own queue) with one dispatch slot per cluster; two jobs go to the test cluster's
slow Slurm login node (sbatch submits at once but answers 6 s later), then one to the local cluster. Without the
limit both worker processes wait on the slow node and the local job waits with them.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from django.conf import settings

from portal.clusters.connect import account_for, backend_for
from portal.jobs.actions import submit as submit_actions
from portal.jobs.actions.submit import submit_job
from portal.jobs.actions.validation import JobRequest
from portal.jobs.models import Job, JobState
from portal.jobs.tasks import dispatch_job_task
from tests.conftest import start_worker, stop_worker, wait_for
from tests.jobs.test_crash_recovery import slow_slurm  # noqa: F401 - the fixture

pytestmark = [pytest.mark.cluster, pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def test_a_slow_login_node_does_not_hold_up_a_job_on_another_cluster(hpc_site, slow_slurm, monkeypatch):  # noqa: F811
    queue = f"slots-{uuid.uuid4().hex[:6]}"
    monkeypatch.setattr(submit_actions, "enqueue_on_commit", lambda *task: None)  # dispatched on this queue only

    def submit(hardware, name: str) -> Job:
        return submit_job(hpc_site.alice, JobRequest(
            project=hpc_site.project, name=name, script="true", hardware=hardware, walltime="00:05:00")).job

    slow = [submit(slow_slurm, "slow-a"), submit(slow_slurm, "slow-b")]
    local = submit(hpc_site.hardware, "local")
    worker = start_worker("slots", queue, Path(settings.VAR_DIR) / f"{queue}.log", KAKEHASHI_CLUSTER_TASK_SLOTS="1")
    try:
        for job in (*slow, local):
            dispatch_job_task.apply_async(args=[job.pk], queue=queue)
        wait_for(lambda: Job.objects.get(pk=local.pk).state != JobState.QUEUED and
                 Job.objects.get(pk=local.pk).scheduler_id, timeout=30, message="the local job's dispatch")
        # The local job went while the slow node still had both of its jobs to answer for.
        assert not Job.objects.filter(pk__in=[job.pk for job in slow], state=JobState.PENDING).exists()
        # The deferred one is not lost: both reach the slow scheduler, one after the other.
        wait_for(lambda: Job.objects.filter(pk__in=[job.pk for job in slow], scheduler_id__gt="").count() == 2,
                 timeout=60, message="both slow jobs to be submitted")
    finally:
        stop_worker(worker)
    backend = backend_for(slow_slurm.cluster, account_for(slow_slurm.cluster, hpc_site.alice, hpc_site.project))
    for job in Job.objects.filter(pk__in=[job.pk for job in slow]).exclude(scheduler_id=""):
        backend.cancel(job.scheduler_id)
