"""Jobs submitted in the portal reach the real test schedulers through sshd, as the researcher's own account."""

from __future__ import annotations

import time
from decimal import Decimal

import pytest
from django.urls import reverse

from backends.base import State
from portal.budgets.models import LedgerEntry
from portal.catalog.models import HardwareType
from portal.clusters.connect import account_for, backend_for
from portal.jobs import tracking
from portal.jobs.actions.dispatch import dispatch_job
from portal.jobs.actions.submit import submit_job
from portal.jobs.actions.validation import BudgetRefused, JobRequest
from portal.jobs.models import Job, JobOutput, JobState
from portal.jobs.specs import build_spec
from tests.conftest import QUEUE_WAIT, wait_for

pytestmark = [pytest.mark.cluster]


def _final(job_id):
    job = Job.objects.get(pk=job_id)
    return job if job.is_final else None


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_run_on_8_a100_goes_to_slurm_with_8_gpus_and_completes_live(client, hpc_site, live_worker):
    client.force_login(hpc_site.alice)
    hardware = HardwareType.objects.get(slug="slurm-a100x8")
    form = {
        "project": hpc_site.project.pk, "name": "eight-gpus", "hardware": hardware.pk, "nodes": 1,
        "walltime": "00:10:00", "launcher": "script", "script": 'echo "visible=$CUDA_VISIBLE_DEVICES"; echo "user=$(id -un)"\n',
        "draft": "3f1a3b4c-0000-4000-8000-000000000001",
    }
    preview = client.post(reverse("job-preview"), form).context["script"]
    response = client.post(reverse("job-new"), form)
    assert response.status_code == 302, response.content.decode()[:2000]
    job = Job.objects.get()
    assert job.rendered_script == preview  # what was previewed is what was submitted
    assert "#SBATCH --gres=gpu:a100:8" in job.rendered_script
    assert "#SBATCH --account=kkdemo" in job.rendered_script
    job = wait_for(lambda: _final(job.pk), timeout=QUEUE_WAIT + 90, message="the Slurm job to finish")
    assert job.state == JobState.COMPLETED, job.state_reason
    assert job.exit_code == 0 and job.scheduler_id.isdigit()
    assert {"pending", "completed"} <= set(job.events.values_list("to_state", flat=True))
    out = wait_for(lambda: JobOutput.objects.filter(job=job, stream="stdout", complete=True).first(), message="stdout")
    text = bytes(out.data).decode()
    assert "visible=0,1,2,3,4,5,6,7" in text and "user=alice" in text
    # Money: reserved at submit from the estimate, settled to Slurm's accounting figure at the end.
    backend = backend_for(job.cluster, account_for(job.cluster, job.user, job.project))
    accounting = backend.final_records([job.scheduler_id])[job.scheduler_id]
    assert job.elapsed_seconds == accounting.elapsed_seconds
    ledger = dict(LedgerEntry.objects.filter(job=job).values_list("kind", "amount"))
    assert ledger["reserve"] == Decimal("0.5000")  # 1 node × 3 points/h × 10 min
    assert ledger["settle"] == job.cost_amount == (Decimal(accounting.elapsed_seconds) * 3 / 3600).quantize(Decimal("0.0001"))
    assert ledger["release"] == ledger["reserve"]


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_a_strict_budget_cancels_a_running_slurm_job_and_charges_what_it_used(hpc_site, live_worker):
    from portal.budgets.models import Budget
    from portal.usage.enforcement import enforce

    job = submit_job(hpc_site.alice, JobRequest(
        project=hpc_site.project, name="forgotten", script="echo started; sleep 300",
        hardware=HardwareType.objects.get(slug="slurm-a100x8"), walltime="01:00:00")).job
    wait_for(lambda: Job.objects.filter(pk=job.pk, state=JobState.RUNNING).exists(), timeout=QUEUE_WAIT + 60,
             message="running")
    # An admin lowers the budget below what the running job has already burnt.
    Budget.objects.filter(project=hpc_site.project).update(amount=Decimal("0.0001"))
    time.sleep(1)  # a second at 3 points an hour is 0.0008 points: over the new budget
    report = enforce(Budget.objects.get(project=hpc_site.project))
    assert report.cancelled == [job.pk]
    job = wait_for(lambda: _final(job.pk), timeout=60, message="the cancellation on Slurm")
    assert job.state == JobState.CANCELLED
    assert "strict budget" in job.events.exclude(reason="").filter(reason__contains="strict").first().reason
    backend = backend_for(job.cluster, account_for(job.cluster, job.user, job.project))
    assert backend.final_records([job.scheduler_id])[job.scheduler_id].state == State.CANCELLED
    assert Decimal("0") < job.cost_amount < Decimal("0.5")  # charged for the minutes it ran, not the hour asked
    with pytest.raises(BudgetRefused):
        submit_job(hpc_site.alice, JobRequest(
            project=hpc_site.project, name="more", script="true", hardware=job.hardware, walltime="00:10:00"))


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_an_impossible_request_fails_with_the_schedulers_own_message(client, hpc_site, live_worker):
    good = HardwareType.objects.get(slug="slurm-a100x8")
    impossible = HardwareType.objects.create(
        cluster=good.cluster, slug="slurm-a100x9", name="Nine A100", gpu_model="a100", gpus_per_node=9,
        cpus_per_node=16, max_nodes=1, scheduler_mapping={"partition": "gpu", "gres": "gpu:a100:9"}, rate=1,
    )
    submission = submit_job(hpc_site.alice, JobRequest(
        project=hpc_site.project, name="too-many", script="true", hardware=impossible, walltime="00:05:00"))
    job = wait_for(lambda: _final(submission.job.pk), timeout=60, message="the refusal")
    assert job.state == JobState.FAILED
    assert "Requested node configuration is not available" in job.state_reason
    # The reservation is given back in full: nothing was spent.
    assert job.cost_amount == 0


@pytest.mark.django_db
def test_a_worker_killed_after_submit_does_not_submit_twice(hpc_site, settings):
    """The state a killed worker leaves: the job is on the scheduler, the portal still says submitting."""
    submission = submit_job(hpc_site.alice, JobRequest(
        project=hpc_site.project, name="once", script="sleep 5", hardware=HardwareType.objects.get(slug="slurm-a100x1"),
        walltime="00:05:00"))
    job = submission.job
    assert dispatch_job(job.pk).status == "submitted"
    first_id = Job.objects.get(pk=job.pk).scheduler_id
    # Rewind the portal's view to "submitting, reply lost, lease expired", as after a crash.
    Job.objects.filter(pk=job.pk).update(state=JobState.SUBMITTING, scheduler_id="", dispatch_lease_until=None)
    outcome = dispatch_job(job.pk)
    assert outcome.status == "found" and outcome.detail == first_id
    job.refresh_from_db()
    assert job.scheduler_id == first_id and job.state == JobState.PENDING
    backend = backend_for(job.cluster, account_for(job.cluster, job.user, job.project))
    same_name = backend.transport.run(["squeue", "-h", "-t", "all", "-n", job.scheduler_name, "-o", "%i"])
    assert same_name.stdout.split() == [first_id]
    backend.cancel(first_id)


@pytest.mark.django_db
def test_a_job_neither_queue_nor_accounting_knows_is_flagged_lost(hpc_site, settings):
    settings.KAKEHASHI_LOST_AFTER_SECONDS = 0
    submission = submit_job(hpc_site.alice, JobRequest(
        project=hpc_site.project, name="ghost", script="true", hardware=HardwareType.objects.get(slug="slurm-a100x1"),
        walltime="00:05:00"))
    Job.objects.filter(pk=submission.job.pk).update(state=JobState.RUNNING, scheduler_id="9999999")
    report = tracking.track_cluster(submission.job.cluster_id)
    job = Job.objects.get(pk=submission.job.pk)
    assert report.lost == 1 and job.state == JobState.LOST
    assert "neither" in job.state_reason


@pytest.mark.django_db
def test_tracking_many_jobs_costs_one_status_call(hpc_site, monkeypatch):
    from tests.backends.conftest import CountingTransport

    jobs = []
    for i in range(5):
        sub = submit_job(hpc_site.alice, JobRequest(
            project=hpc_site.project, name=f"many-{i}", script="sleep 20",
            hardware=HardwareType.objects.get(slug="slurm-a100x1"), walltime="00:05:00"))
        dispatch_job(sub.job.pk)
        jobs.append(sub.job)
    counted = []

    import portal.jobs.tracking as job_tracking

    real = job_tracking.backend_for

    def counting_backend(cluster, account=None):
        backend = real(cluster, account)
        backend.transport = CountingTransport(backend.transport)
        counted.append(backend.transport)
        return backend

    monkeypatch.setattr(job_tracking, "backend_for", counting_backend)
    report = tracking.track_cluster(jobs[0].cluster_id)
    assert report.queried == 5
    assert sum(len(t.commands) for t in counted) == 1
    for job in jobs:
        job.refresh_from_db()
        assert job.state in {JobState.PENDING, JobState.RUNNING}
        backend_for(job.cluster, account_for(job.cluster, job.user, job.project)).cancel(job.scheduler_id)


@pytest.mark.django_db
def test_the_rendered_spec_of_a_job_matches_what_the_backend_submits(hpc_site):
    hw = HardwareType.objects.get(slug="slurm-a100x8")
    sub = submit_job(hpc_site.alice, JobRequest(
        project=hpc_site.project, name="spec", script="echo", hardware=hw, nodes=2, walltime="01:00:00",
        launcher="torchrun"))
    backend = backend_for(hw.cluster, account_for(hw.cluster, hpc_site.alice, hpc_site.project))
    assert backend.render(build_spec(sub.job)) == sub.job.rendered_script
    assert "srun --nodes=2 --ntasks=2 --ntasks-per-node=1" in sub.job.rendered_script


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_tsubame_f_node_times_two_submits_with_the_projects_group(client, hpc_site, live_worker):
    client.force_login(hpc_site.alice)
    hardware = HardwareType.objects.get(slug="tsubame-f-node")
    response = client.post(reverse("job-new"), {
        "project": hpc_site.project.pk, "name": "tsubame", "hardware": hardware.pk, "nodes": 2, "walltime": "00:10:00",
        "launcher": "script", "script": 'echo "project=$(qstat -j "$JOB_ID" | grep -E "^(project|hard resource_list)")"',
    })
    assert response.status_code == 302
    job = Job.objects.get()
    assert job.submit_command == "qsub -g kkdemo -terse -w e job.sh"
    assert "#$ -l f_node=2" in job.rendered_script and "#$ -l h_rt=0:10:00" in job.rendered_script
    job = wait_for(lambda: _final(job.pk), timeout=90, message="the TSUBAME-style job")
    assert job.state == JobState.COMPLETED, job.state_reason
    backend = backend_for(job.cluster, account_for(job.cluster, job.user, job.project))
    assert backend.final_records([job.scheduler_id])[job.scheduler_id].raw["project"] == "kkdemo"
    out = wait_for(lambda: JobOutput.objects.filter(job=job, stream="stdout", complete=True).first(), message="stdout")
    assert "f_node=2" in bytes(out.data).decode()
    assert job.cost_amount == (Decimal(job.elapsed_seconds) * 2 * 1 / 3600).quantize(Decimal("0.0001"))


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_a_pbs_torque_job_with_8_gpus_runs_and_settles(hpc_site, live_worker):
    job = submit_job(hpc_site.alice, JobRequest(
        project=hpc_site.project, name="torque", script='echo "visible=$CUDA_VISIBLE_DEVICES"',
        hardware=HardwareType.objects.get(slug="pbs-a100x8"), walltime="00:10:00")).job
    assert "#PBS -l nodes=1:ppn=16:gpus=8" in job.rendered_script  # ppn = the node's CPUs
    job = wait_for(lambda: _final(job.pk), timeout=90, message="the PBS job")
    assert job.state == JobState.COMPLETED and job.exit_code == 0, job.state_reason
    out = wait_for(lambda: JobOutput.objects.filter(job=job, stream="stdout", complete=True).first(), message="stdout")
    assert "visible=0,1,2,3,4,5,6,7" in bytes(out.data).decode()
    assert job.cost_amount is not None


@pytest.mark.django_db
def test_a_cluster_may_run_a_projects_jobs_as_its_service_account(hpc_site, cluster_keys):
    """Where a centre permits it: every member's job runs as the project's account (here the user bob)."""
    from portal.clusters.models import Cluster, ClusterAccount, IdentityMode

    cluster = Cluster.objects.get(slug="slurm-test")
    cluster.identity_mode = IdentityMode.PROJECT
    cluster.save()
    private, public = cluster_keys["bob"]
    service = ClusterAccount(cluster=cluster, project=hpc_site.project, username="bob", public_key=public)
    service.set_private_key(private)
    service.save()
    job = submit_job(hpc_site.alice, JobRequest(
        project=hpc_site.project, name="as-service", script='echo "whoami=$(id -un)"',
        hardware=HardwareType.objects.get(slug="slurm-a100x1"), walltime="00:05:00")).job
    assert job.account_username == "bob"
    assert dispatch_job(job.pk).status == "submitted"
    job.refresh_from_db()
    backend = backend_for(cluster, account_for(cluster, job.user, job.project))
    record = wait_for(lambda: backend.final_records([job.scheduler_id]).get(job.scheduler_id), timeout=60,
                      message="accounting")
    assert record.state == State.COMPLETED
    assert "whoami=bob" in backend.read_output(job.remote_dir, "stdout").decode()


def _stuck_sge_job(hpc_site, submitter: str) -> tuple[Job, str]:
    """alice's portal job pointing at a job `submitter` put into SGE's error state by hand (the portal never
    writes to a path it cannot): the shepherd fails to open /root/nope.log and SGE keeps the job as `Eqw`."""
    from portal.clusters.models import ClusterAccount

    job = submit_job(hpc_site.alice, JobRequest(
        project=hpc_site.project, name="eqw", script="true", hardware=HardwareType.objects.get(slug="sge-gpu"),
        walltime="00:05:00")).job
    account = ClusterAccount.objects.get(cluster=job.cluster, username=submitter)
    backend = backend_for(job.cluster, account)
    raw = backend.transport.run_shell("echo true | qsub -terse -N kh-eqw -o /root/nope.log -j y")
    assert raw.ok, raw.message
    scheduler_id = raw.stdout.strip()
    Job.objects.filter(pk=job.pk).update(state=JobState.PENDING, scheduler_id=scheduler_id)

    def stuck():
        status = backend.statuses([scheduler_id]).get(scheduler_id)
        return status is not None and status.stuck

    wait_for(stuck, timeout=60, message="the error state")
    return job, scheduler_id


def _track_until_the_cluster_answers(cluster_id: int) -> tracking.TrackReport:
    """One tracking cycle, repeated (as beat would) only while the login node does not answer in time: on a
    loaded machine a status call can time out, and such a cycle rightly changes nothing."""
    deadline = time.monotonic() + 60
    report = tracking.track_cluster(cluster_id)
    while report.error and time.monotonic() < deadline:
        time.sleep(1)
        report = tracking.track_cluster(cluster_id)
    assert not report.error, report.error
    return report


@pytest.mark.django_db
def test_a_grid_engine_job_stuck_in_error_state_fails_with_its_cause_and_leaves_the_queue(hpc_site):
    job, scheduler_id = _stuck_sge_job(hpc_site, "alice")

    report = _track_until_the_cluster_answers(job.cluster_id)

    job.refresh_from_db()
    assert job.state == JobState.FAILED, (report, list(job.events.values_list("reason", flat=True)))
    assert "input/output file" in job.state_reason or "error state" in job.state_reason, job.state_reason
    assert report.removed == 1
    backend = backend_for(job.cluster, account_for(job.cluster, job.user, job.project))
    assert scheduler_id not in backend.statuses([scheduler_id])
    assert job.events.filter(reason__contains="deleted from the scheduler's queue").exists()


@pytest.mark.django_db
def test_a_stuck_job_the_owner_may_not_delete_is_failed_and_the_job_page_says_it_is_still_queued(hpc_site):
    """The entry belongs to bob on the cluster, so alice's qdel is refused by SGE itself."""
    from portal.clusters.models import ClusterAccount

    job, scheduler_id = _stuck_sge_job(hpc_site, "bob")
    bob = backend_for(job.cluster, ClusterAccount.objects.get(cluster=job.cluster, username="bob"))
    try:
        report = _track_until_the_cluster_answers(job.cluster_id)

        job.refresh_from_db()
        assert job.state == JobState.FAILED
        assert report.removed == 0
        assert scheduler_id in bob.statuses([scheduler_id])
        assert job.events.filter(reason__contains="deleting it failed").exists()
    finally:
        bob.cancel(scheduler_id)
