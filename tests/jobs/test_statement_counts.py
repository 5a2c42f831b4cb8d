"""The bookkeeping of a submit and its dispatch costs a fixed, small number of SQL statements per job.

Counted with CaptureQueriesContext against the real PostgreSQL (a count is stable where a time is not); the
transaction brackets (BEGIN, COMMIT, savepoints) are not counted, as they are not round trips of their own on a
pooled connection. Before issue 17 a job took 22 statements (13 submit + 9 dispatch) on the local cluster, 24 on Slurm;
then 15 (9 + 6) and 17; now 7 (4 + 3) and 8 (docs/decisions/0024).
"""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from portal.catalog.models import HardwareType
from portal.clusters.connect import account_for, backend_for
from portal.jobs.actions import submit as submit_actions
from portal.jobs.actions.dispatch import dispatch_job
from portal.jobs.actions.submit import submit_job
from portal.jobs.actions.sweeps import submit_sweep
from portal.jobs.actions.validation import JobRequest
from portal.jobs.models import Job, JobEvent, JobState

pytestmark = [
    pytest.mark.django_db(transaction=True),
    # A live worker an earlier test left running would dispatch these jobs too (and, dispatching in batches, take
    # a test's own job along with its warm-up one), so the counts would not be this test's alone.
    pytest.mark.usefixtures("no_live_worker"),
]

_BRACKETS = ("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE SAVEPOINT", "ROLLBACK TO SAVEPOINT")


def statements(ctx: CaptureQueriesContext) -> list[str]:
    return [q["sql"] for q in ctx.captured_queries if not q["sql"].upper().startswith(_BRACKETS)]


def _request(site, hardware=None, name: str = "count", script: str = "true") -> JobRequest:
    return JobRequest(project=site.project, name=name, script=script, hardware=hardware or site.hardware,
                      walltime="00:01:00")


def test_submitting_and_dispatching_one_job_takes_at_most_7_statements(local_site):
    submit_job(local_site.alice, _request(local_site))  # caches (content types, templates) warm
    with CaptureQueriesContext(connection) as submit:
        job = submit_job(local_site.alice, _request(local_site)).job
    with CaptureQueriesContext(connection) as dispatch:
        assert dispatch_job(job.pk).status == "submitted"
    submitted, dispatched = statements(submit), statements(dispatch)
    # Submit: the role, the grant (with the budget's unit), the job with its event and audit row (one statement),
    # the reservation (one conditional UPDATE of the balance the budget row keeps, with its ledger entry: a sum of
    # the ledger read by a locking statement would be of the snapshot taken before the wait for the lock, and
    # concurrent submits would overspend; tests/budgets/test_budgets.py, the hundred concurrent submits).
    # Dispatch: the job read and locked, the lease with its event, the compare-and-swap to PENDING with its event.
    assert len(submitted) <= 4, "\n".join(submitted)
    assert len(dispatched) <= 3, "\n".join(dispatched)
    # The guarantees the statements buy: an event for every transition, the estimate reserved once.
    job.refresh_from_db()
    assert job.state == JobState.PENDING and job.scheduler_id
    assert list(JobEvent.objects.filter(job=job).values_list("to_state", flat=True)) == [
        "queued", "submitting", "pending"]
    assert job.ledger.filter(kind="reserve").count() == 1


@pytest.mark.cluster
def test_a_slurm_job_costs_at_most_8_statements_from_submit_to_pending(hpc_site):
    a100 = HardwareType.objects.get(slug="slurm-a100x1")
    submit_job(hpc_site.alice, _request(hpc_site, a100))
    with CaptureQueriesContext(connection) as ctx:
        job = submit_job(hpc_site.alice, _request(hpc_site, a100)).job
        outcome = dispatch_job(job.pk)
    assert outcome.status == "submitted", outcome
    counted = statements(ctx)
    # One more than the local job: the account it runs as is looked up at submit (and kept with the job, so the
    # dispatch reads it with the job's row).
    assert len(counted) <= 8, "\n".join(counted)
    _cancel_on_slurm(hpc_site, Job.objects.get(pk=job.pk).scheduler_id)


def test_a_sweep_submitted_job_by_job_costs_at_most_8_statements_per_job(local_site, monkeypatch):
    monkeypatch.setattr(submit_actions, "enqueue_on_commit", lambda *task: None)  # dispatched here, by this test only
    submit_job(local_site.alice, _request(local_site))
    points = 20
    with CaptureQueriesContext(connection) as ctx:
        sweep = submit_sweep(local_site.alice, _request(local_site, name="grid"),
                                     {"SEED": list(range(points))}, array=False)
        for submission in sweep.submissions:
            assert dispatch_job(submission.job.pk).status == "submitted"
    counted = statements(ctx)
    assert len(counted) <= 8 * points, f"{len(counted)} statements for {points} jobs"
    assert JobEvent.objects.filter(job__group=sweep.group).count() == 3 * points


@pytest.mark.cluster
def test_a_sweep_submitted_as_one_array_costs_less_than_one_statement_per_job(hpc_site):
    a100 = HardwareType.objects.get(slug="slurm-a100x1")
    submit_job(hpc_site.alice, _request(hpc_site, a100))
    points = 50
    with CaptureQueriesContext(connection) as ctx:
        sweep = submit_sweep(hpc_site.alice, _request(hpc_site, a100, name="grid"),
                                     {"SEED": list(range(points))}, array=True)
        assert dispatch_job(sweep.submissions[0].job.pk).status == "submitted"
    counted = statements(ctx)
    assert len(counted) < points, "\n".join(counted)
    jobs = Job.objects.filter(group=sweep.group)
    assert {job.state for job in jobs} == {JobState.PENDING}
    assert JobEvent.objects.filter(job__group=sweep.group).count() == 3 * points
    sweep.group.refresh_from_db()
    _cancel_on_slurm(hpc_site, sweep.group.scheduler_id)


def _cancel_on_slurm(site, scheduler_id: str) -> None:
    """Leave the shared test cluster's queue as it was."""
    cluster = site.clusters["slurm-test"]
    backend_for(cluster, account_for(cluster, site.alice, site.project)).cancel(scheduler_id)
