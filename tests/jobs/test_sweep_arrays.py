"""A sweep on Slurm or Grid Engine is submitted as one scheduler array; each point is still a Job of its own."""

from __future__ import annotations

import shlex

import pytest
from django.urls import reverse

from backends.base import State
from portal.budgets.models import LedgerEntry
from portal.catalog.models import HardwareType
from portal.clusters.connect import account_for, backend_for
from portal.clusters.models import Cluster
from portal.jobs.actions.cancel import request_cancel
from portal.jobs.actions.dispatch import dispatch_job, recover_stale_jobs
from portal.jobs.actions.sweeps import SweepSubmission, submit_sweep
from portal.jobs.actions.validation import JobRequest, SubmitError
from portal.jobs.models import Job, JobGroup, JobOutput, JobState
from tests.conftest import QUEUE_WAIT, wait_for

pytestmark = [pytest.mark.cluster]

# hardware slug → how the scheduler names element i of array A
SITES = [("slurm-a100x1", "{}_{}"), ("tsubame-f-node", "{}.{}")]


def _sweep(site, slug: str, script: str, values: list, **kwargs) -> SweepSubmission:
    req = JobRequest(project=site.project, name="lr-sweep", script=script,
                             hardware=HardwareType.objects.get(slug=slug), walltime="00:10:00")
    return submit_sweep(site.alice, req, {"LR": values}, **kwargs)


def _all_final(group: JobGroup) -> list[Job] | None:
    jobs = list(group.jobs.order_by("array_index"))
    return jobs if all(job.is_final for job in jobs) else None


def _backend(job: Job):
    return backend_for(job.cluster, account_for(job.cluster, job.user, job.project))


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("slug", "element"), SITES, ids=["slurm", "sge-tsubame"])
def test_a_sweep_is_one_scheduler_array_and_each_point_ends_with_its_own_result_and_cost(hpc_site, live_worker,
                                                                                       slug, element):
    script = 'echo "lr=$LR"; echo "$LR" > "$KAKEHASHI_OUTPUT_DIR/lr.txt"; [ "$LR" = "0.2" ] && exit 3; exit 0\n'
    sweep = _sweep(hpc_site, slug, script, [0.1, 0.2, 0.3])
    group = sweep.group
    assert sweep.array and group.array
    # One script for the whole array, with the array directive and each element's parameters in it.
    assert {job.rendered_script for job in group.jobs.all()} == {sweep.script}
    assert ("--array=1-3" in sweep.script) or ("#$ -t 1-3" in sweep.script)

    jobs = wait_for(lambda: _all_final(group), timeout=120, message="every element of the array to end")

    group.refresh_from_db()
    assert group.scheduler_id.isdigit()
    assert [job.scheduler_id for job in jobs] == [element.format(group.scheduler_id, i) for i in (1, 2, 3)]
    assert [job.state for job in jobs] == [JobState.COMPLETED, JobState.FAILED, JobState.COMPLETED]
    assert [job.exit_code for job in jobs] == [0, 3, 0]
    for job, lr in zip(jobs, ("0.1", "0.2", "0.3"), strict=True):
        out = wait_for(lambda job=job: JobOutput.objects.filter(job=job, stream="stdout", complete=True).first(),
                       message=f"stdout of element {job.array_index}")
        assert f"lr={lr}" in bytes(out.data).decode()
        assert f"lr={0.1 if lr != '0.1' else 0.2}" not in bytes(out.data).decode()
        # The final fetch stores the logs, then collects outputs/.
        artifacts = wait_for(lambda job=job: list(job.artifacts.values_list("path", flat=True)),
                             message=f"outputs of element {job.array_index}")
        assert artifacts == ["lr.txt"]
        # Each element is charged its own accounted time and gives back the rest of its reservation.
        ledger = dict(LedgerEntry.objects.filter(job=job).values_list("kind", "amount"))
        accounting = _backend(job).final_records([job.scheduler_id])[job.scheduler_id]
        assert job.elapsed_seconds == accounting.elapsed_seconds
        assert ledger["settle"] == job.cost_amount and ledger["release"] == ledger["reserve"]


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("slug", "element"), SITES, ids=["slurm", "sge-tsubame"])
def test_cancelling_one_point_of_an_array_sweep_leaves_the_others_to_finish(client, hpc_site, live_worker,
                                                                           slug, element):
    script = 'if [ "$LR" = "stop" ]; then sleep 300; fi; echo "done $LR"\n'
    group = _sweep(hpc_site, slug, script, ["go", "stop", "go"]).group
    stop = group.jobs.get(array_index=2)
    wait_for(lambda: Job.objects.filter(pk=stop.pk, state=JobState.RUNNING).exists(), timeout=QUEUE_WAIT + 90,
             message="the element that sleeps to run")

    client.force_login(hpc_site.alice)
    assert client.post(reverse("job-cancel", args=[stop.pk])).status_code == 302

    jobs = wait_for(lambda: _all_final(group), timeout=120, message="every element of the array to end")
    assert [job.state for job in jobs] == [JobState.COMPLETED, JobState.CANCELLED, JobState.COMPLETED]
    assert _backend(stop).final_records([jobs[1].scheduler_id])[jobs[1].scheduler_id].state == State.CANCELLED
    page = client.get(reverse("job-group", args=[group.pk])).content.decode()
    assert f"array {group.scheduler_id}" in page or f"array {JobGroup.objects.get(pk=group.pk).scheduler_id}" in page


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_cancel_the_sweep_stops_every_element_of_the_array_on_slurm(client, hpc_site, live_worker):
    group = _sweep(hpc_site, "slurm-a100x1", "sleep 300", [1, 2, 3]).group
    wait_for(lambda: not group.jobs.exclude(state=JobState.RUNNING).exclude(state=JobState.PENDING).exists()
             and not group.jobs.filter(scheduler_id="").exists(), timeout=60, message="the array on Slurm")
    client.force_login(hpc_site.alice)
    page = client.get(reverse("job-group", args=[group.pk])).content.decode()
    assert "Cancel the sweep (3 not ended)" in page

    assert client.post(reverse("job-group-cancel", args=[group.pk])).status_code == 302

    jobs = wait_for(lambda: _all_final(group), timeout=90, message="every element to be cancelled")
    assert {job.state for job in jobs} == {JobState.CANCELLED}
    # Nothing of the array is left to run on Slurm. (Elements cancelled while still pending may leave no record
    # of their own in the queue or accounting; the portal then ends them as cancelled by request.)
    left = _backend(jobs[0]).transport.run_shell(
        f"squeue -h -r -t PENDING,RUNNING,CONFIGURING,COMPLETING -n {shlex.quote(group.scheduler_name)} -o %i")
    assert left.ok and left.stdout.strip() == "", left.stdout
    statuses = _backend(jobs[0]).statuses([job.scheduler_id for job in jobs])
    assert all(status.state == State.CANCELLED for status in statuses.values()), statuses
    assert "Cancel the sweep" not in client.get(reverse("job-group", args=[group.pk])).content.decode()


def _arrays_named(job: Job) -> set[str]:
    """The distinct scheduler arrays carrying this sweep's name, asked of the scheduler itself."""
    name = shlex.quote(job.scheduler_name)
    if job.cluster.kind == "slurm":
        out = _backend(job).transport.run_shell(f"squeue -h -r -t all -n {name} -o %F").stdout
    else:
        out = _backend(job).transport.run_shell(
            f"qstat -u '*' -xml | grep -B2 -A2 {name} | sed -n 's/.*<JB_job_number>\\([0-9]*\\)<.*/\\1/p'").stdout
    return set(out.split())


@pytest.mark.django_db
@pytest.mark.parametrize(("slug", "element"), SITES, ids=["slurm", "sge-tsubame"])
def test_a_worker_killed_while_submitting_an_array_never_submits_it_twice(hpc_site, slug, element):
    group = _sweep(hpc_site, slug, "sleep 60", [1, 2, 3]).group
    first = group.jobs.order_by("pk").first()
    assert dispatch_job(first.pk).status == "submitted"
    array_id = JobGroup.objects.get(pk=group.pk).scheduler_id
    # Another dispatch (a duplicate message, the recovery sweep) finds nothing waiting.
    assert dispatch_job(group.jobs.order_by("pk").last().pk).status == "skipped"
    # Rewind to "submitting, reply lost, lease expired", as after a worker killed mid-submit.
    group.jobs.update(state=JobState.SUBMITTING, scheduler_id="", dispatch_lease_until=None)
    assert recover_stale_jobs() == [first.pk]  # one dispatch for the whole array
    outcome = dispatch_job(first.pk)
    try:
        assert outcome.status == "found" and outcome.detail == array_id
        jobs = list(group.jobs.order_by("array_index"))
        assert [job.scheduler_id for job in jobs] == [element.format(array_id, i) for i in (1, 2, 3)]
        assert {job.state for job in jobs} == {JobState.PENDING}
        assert _arrays_named(first) == {array_id}
    finally:
        _backend(first).cancel(array_id)


@pytest.mark.django_db
@pytest.mark.parametrize(("slug", "element"), SITES, ids=["slurm", "sge-tsubame"])
def test_a_point_cancelled_before_the_array_is_submitted_is_deleted_from_it(hpc_site, slug, element):
    group = _sweep(hpc_site, slug, "sleep 60", [1, 2, 3]).group
    dropped = group.jobs.get(array_index=2)
    request_cancel(dropped, hpc_site.alice)
    assert Job.objects.get(pk=dropped.pk).state == JobState.CANCELLED

    assert dispatch_job(group.jobs.get(array_index=1).pk).status == "submitted"
    array_id = JobGroup.objects.get(pk=group.pk).scheduler_id
    backend = _backend(dropped)
    try:
        assert "deleted its element" in dropped.events.last().reason
        element_id = element.format(array_id, 2)

        def gone_or_going():  # an element already started when it was deleted takes its scheduler a moment to end
            status = backend.statuses([element_id]).get(element_id)
            return status is None or status.state.is_final or status.reason

        wait_for(gone_or_going, timeout=30, message=f"element {element_id} gone, or on its way out")
        states = {job.array_index: job.state for job in group.jobs.all()}
        assert states == {1: JobState.PENDING, 2: JobState.CANCELLED, 3: JobState.PENDING}
    finally:
        backend.cancel(array_id)


@pytest.mark.django_db
def test_an_array_the_scheduler_refuses_fails_every_point_and_gives_back_their_reservations(hpc_site):
    group = _sweep(hpc_site, "slurm-a100x1", "sleep 60", [1, 2, 3]).group
    # As if the partition had gone away after the sweep was recorded: sbatch refuses the array's one script.
    script = JobGroup.objects.get(pk=group.pk).rendered_script
    JobGroup.objects.filter(pk=group.pk).update(rendered_script=script.replace("--partition=gpu",
                                                                               "--partition=nosuchpartition"))
    outcome = dispatch_job(group.jobs.order_by("pk").first().pk)
    assert outcome.status == "refused", outcome
    jobs = list(group.jobs.order_by("array_index"))
    assert {job.state for job in jobs} == {JobState.FAILED}
    assert all("the scheduler refused the array" in job.state_reason and not job.scheduler_id for job in jobs)
    assert all(job.ledger.filter(kind="release").exists() for job in jobs)
    assert JobGroup.objects.get(pk=group.pk).scheduler_id == ""


@pytest.mark.django_db
def test_an_array_whose_login_node_is_down_waits_in_submitting_and_is_submitted_once_when_it_is_back(hpc_site):
    group = _sweep(hpc_site, "slurm-a100x1", "sleep 60", [1, 2, 3]).group
    first = group.jobs.order_by("pk").first()
    cluster = Cluster.objects.get(slug="slurm-test")
    real_port = cluster.login_port
    Cluster.objects.filter(pk=cluster.pk).update(login_port=2299)  # nothing listens there: the login node is down
    outcome = dispatch_job(first.pk)
    assert outcome.status == "retry", outcome
    jobs = list(group.jobs.order_by("array_index"))
    assert {job.state for job in jobs} == {JobState.SUBMITTING}
    assert all(job.dispatch_lease_until is None and "could not reach the scheduler yet" in job.state_reason
               for job in jobs)
    Cluster.objects.filter(pk=cluster.pk).update(login_port=real_port)  # the login node is back
    outcome = dispatch_job(first.pk)
    array_id = JobGroup.objects.get(pk=group.pk).scheduler_id
    try:
        assert outcome.status in {"submitted", "found"} and outcome.detail == array_id
        jobs = list(group.jobs.order_by("array_index"))
        assert [job.scheduler_id for job in jobs] == [f"{array_id}_{i}" for i in (1, 2, 3)]
        assert {job.state for job in jobs} == {JobState.PENDING}
        assert _arrays_named(first) == {array_id}
    finally:
        _backend(first).cancel(array_id)


@pytest.mark.django_db
def test_the_preview_of_a_sweep_on_slurm_shows_the_array_script_that_will_be_submitted(client, hpc_site):
    client.force_login(hpc_site.alice)
    form = {
        "project": hpc_site.project.pk, "name": "lr-sweep", "hardware": HardwareType.objects.get(slug="slurm-a100x1").pk,
        "nodes": 1, "walltime": "00:10:00", "launcher": "script", "script": 'echo "$LR"\n', "sweep": "LR = 0.1, 0.2",
        "draft": "3f1a3b4c-0000-4000-8000-000000000042",
    }
    response = client.post(reverse("job-preview"), form)
    assert response.status_code == 200
    script = response.context["script"]
    assert "#SBATCH --array=1-2" in script and "  1) export LR=0.1 ;;" in script and "  2) export LR=0.2 ;;" in script
    assert "one scheduler array" in response.content.decode()
    assert client.post(reverse("job-new"), form).status_code == 302
    group = JobGroup.objects.get()
    assert group.array and {job.rendered_script for job in group.jobs.all()} == {script}
    # The same form posted again (a double click, a reload) is the same sweep, not a second array.
    assert client.post(reverse("job-new"), form).status_code == 302
    assert JobGroup.objects.count() == 1 and Job.objects.count() == 2


@pytest.mark.django_db
def test_a_sweep_on_pbs_is_submitted_job_by_job(hpc_site):
    sweep = _sweep(hpc_site, "pbs-cpu", 'echo "$LR"', [1, 2])
    assert not sweep.array and not sweep.group.array
    assert {job.array_index for job in sweep.group.jobs.all()} == {None}
    with pytest.raises(SubmitError, match="job by job"):
        _sweep(hpc_site, "pbs-cpu", 'echo "$LR"', [1, 2], array=True)
