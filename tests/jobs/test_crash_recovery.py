"""A crash anywhere loses no job and never submits one twice; the portal says what it knows meanwhile."""

from __future__ import annotations

import os
import signal
import uuid
from decimal import Decimal
from pathlib import Path

import pytest
from django.conf import settings

from portal.catalog.models import HardwareType
from portal.clusters.connect import account_for, backend_for
from portal.clusters.models import Allocation, Cluster, ClusterAccount, Kind
from portal.jobs import tracking
from portal.jobs.actions import submit as submit_actions
from portal.jobs.actions.dispatch import dispatch_job
from portal.jobs.actions.submit import submit_job
from portal.jobs.actions.validation import JobRequest
from portal.jobs.models import Job, JobState
from portal.jobs.tasks import dispatch_job_task
from tests.conftest import start_worker, stop_worker, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def slow_slurm(hpc_site, cluster_keys, test_cluster):
    """A Slurm login node whose sbatch submits at once but answers 6 s later (tests/cluster, port 2226)."""
    keys = (test_cluster / "known_hosts").read_text().splitlines()
    cluster = Cluster.objects.create(
        slug="slurm-slow", name="Slurm (slow replies)", kind=Kind.SLURM, login_host="127.0.0.1", login_port=2226,
        host_keys="\n".join(k for k in keys if k.startswith("[127.0.0.1]:2226 ")),
    )
    hardware = HardwareType.objects.create(
        cluster=cluster, slug="slow-a100x1", name="A100 slice", gpu_model="a100", gpus_per_node=1, cpus_per_node=1,
        scheduler_mapping={"partition": "gpu", "gres": "gpu:a100:1"}, rate=Decimal("1"),
    )
    Allocation.objects.create(project=hpc_site.project, cluster=cluster, group="kkdemo")
    private, public = cluster_keys["alice"]
    account = ClusterAccount(cluster=cluster, user=hpc_site.alice, username="alice", public_key=public)
    account.set_private_key(private)
    account.save()
    return hardware


def _scheduler_jobs_named(job: Job) -> list[str]:
    backend = backend_for(job.cluster, account_for(job.cluster, job.user, job.project))
    result = backend.transport.run(["squeue", "-h", "-t", "all", "-n", job.scheduler_name, "-o", "%i"])
    return result.stdout.split()


def test_a_worker_killed_after_sbatch_but_before_the_reply_leaves_one_job(hpc_site, slow_slurm, monkeypatch):
    queue = f"crash-{uuid.uuid4().hex[:6]}"
    log = Path(settings.VAR_DIR) / f"{queue}.log"
    fast_recovery = {
        "KAKEHASHI_DISPATCH_LEASE_SECONDS": "3", "KAKEHASHI_STALE_DISPATCH_SECONDS": "2",
        "KAKEHASHI_RECOVER_INTERVAL": "1", "KAKEHASHI_SSH_TIMEOUT": "20",
    }
    # Keep this job away from the session's worker: it is dispatched only on this test's own queue.
    monkeypatch.setattr(submit_actions, "enqueue_on_commit", lambda *task: None)
    job = submit_job(hpc_site.alice, JobRequest(
        project=hpc_site.project, name="crash", script="sleep 4", hardware=slow_slurm, walltime="00:05:00")).job

    first = start_worker("crash-a", queue, log, **fast_recovery)
    try:
        dispatch_job_task.apply_async(args=[job.pk], queue=queue)
        # sbatch has run on the login node; the worker is still waiting for the (slow) reply.
        submitted = wait_for(lambda: _scheduler_jobs_named(job), timeout=30, interval=0.2, message="the sbatch")
        assert Job.objects.get(pk=job.pk).state == JobState.SUBMITTING
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(timeout=10)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)

    # What the portal knows after the crash: the job is being submitted, with no scheduler id yet.
    after_crash = Job.objects.get(pk=job.pk)
    assert (after_crash.state, after_crash.scheduler_id) == (JobState.SUBMITTING, "")

    second = start_worker("crash-b", queue, log, **fast_recovery)
    try:
        recovered = wait_for(lambda: Job.objects.filter(pk=job.pk, scheduler_id__gt="").first(), timeout=60,
                             message="the recovery sweep to find the job")
        assert recovered.scheduler_id == submitted[0]
        assert "found after a lost reply" in recovered.events.filter(to_state=JobState.PENDING).get().reason
        assert _scheduler_jobs_named(job) == submitted  # still exactly one job with this name
    finally:
        stop_worker(second)


def test_a_job_whose_queue_message_was_lost_in_a_redis_restart_still_runs(local_site, monkeypatch):
    """Redis here keeps nothing on disk: a restart drops queued messages. The recovery sweep re-sends them."""
    import redis

    queue = f"lost-{uuid.uuid4().hex[:6]}"
    job = submit_job(local_site.alice, JobRequest(
        project=local_site.project, name="lost-message", script="echo survived", hardware=local_site.hardware,
        walltime="00:05:00")).job
    dispatch_job_task.apply_async(args=[job.pk], queue=queue)
    broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    assert broker.llen(queue) == 1
    broker.delete(queue)  # what a Redis restart does to an unconsumed message
    worker = start_worker("redis-restart", queue, Path(settings.VAR_DIR) / f"{queue}.log",
                          KAKEHASHI_STALE_DISPATCH_SECONDS="2", KAKEHASHI_RECOVER_INTERVAL="1")
    try:
        done = wait_for(lambda: Job.objects.filter(pk=job.pk, state=JobState.COMPLETED).first(), timeout=60,
                        message="the job to run after the lost message")
        assert done.exit_code == 0
    finally:
        stop_worker(worker)


@pytest.mark.django_db  # not transactional: the session's live worker must not see (and dispatch) this job
def test_an_unreachable_login_node_keeps_the_job_submitting_and_says_why(hpc_site):
    cluster = Cluster.objects.get(slug="slurm-test")
    real_port = cluster.login_port
    Cluster.objects.filter(pk=cluster.pk).update(login_port=2299)  # nothing listens there: the login node is down
    job = submit_job(hpc_site.alice, JobRequest(
        project=hpc_site.project, name="patient", script="echo finally",
        hardware=HardwareType.objects.get(slug="slurm-a100x1"), walltime="00:05:00")).job
    outcome = dispatch_job(job.pk)
    job.refresh_from_db()
    assert outcome.status == "retry"
    assert job.state == JobState.SUBMITTING and job.scheduler_id == ""
    assert "could not reach the scheduler yet" in job.state_reason and "2299" in job.state_reason
    Cluster.objects.filter(pk=cluster.pk).update(login_port=real_port)  # the login node is back
    outcome = dispatch_job(job.pk)
    job.refresh_from_db()
    assert outcome.status in {"submitted", "found"} and job.state == JobState.PENDING
    assert len(_scheduler_jobs_named(job)) == 1


@pytest.mark.django_db  # not transactional, as above
def test_tracking_an_unreachable_cluster_changes_no_job_and_flags_the_cluster(hpc_site, settings):
    settings.KAKEHASHI_LOST_AFTER_SECONDS = 0
    job = submit_job(hpc_site.alice, JobRequest(
        project=hpc_site.project, name="watched", script="sleep 30",
        hardware=HardwareType.objects.get(slug="slurm-a100x1"), walltime="00:05:00")).job
    dispatch_job(job.pk)
    cluster = Cluster.objects.get(slug="slurm-test")
    Cluster.objects.filter(pk=cluster.pk).update(login_port=2299)
    report = tracking.track_cluster(cluster.pk)
    job.refresh_from_db()
    assert report.error and report.lost == 0
    assert job.state == JobState.PENDING  # silence is not taken for "lost" or "done"
    assert "2299" in Cluster.objects.get(pk=cluster.pk).last_error
    Cluster.objects.filter(pk=cluster.pk).update(login_port=2222)
    assert tracking.track_cluster(cluster.pk).error == ""
    assert Cluster.objects.get(pk=cluster.pk).last_error == ""
    backend_for(job.cluster, account_for(job.cluster, job.user, job.project)).cancel(job.scheduler_id)
