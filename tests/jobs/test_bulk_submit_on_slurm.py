"""A bulk submit's jobs reach the real Slurm test cluster, each its own scheduler job, and complete
(issue 28, goal 4; docs/decisions/0053)."""

from __future__ import annotations

import json

import pytest

from portal.api.tokens import issue_token
from portal.budgets.models import LedgerEntry
from portal.jobs.models import Job, JobState
from tests.conftest import ended_job, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def test_a_bulk_submits_jobs_each_reach_slurm_with_its_own_id_and_complete_with_their_money_settled(
        client, hpc_site, live_worker):
    _, secret = issue_token(hpc_site.alice, name="bulk", scopes=["read", "submit"])
    bodies = [{"project": "vision", "name": f"bulk-{i}", "hardware": "slurm-a100x1", "walltime": "00:05:00",
               "script": f'echo "bulk-{i} as $(id -un)"\n'} for i in range(6)]
    response = client.post("/api/v1/jobs/batch/", json.dumps({"jobs": bodies}), content_type="application/json",
                           headers={"Authorization": f"Bearer {secret}", "Idempotency-Key": "bulk-on-slurm"})
    assert response.status_code == 201, response.content
    ids = [job["id"] for job in response.json()["jobs"]]

    jobs = [wait_for(lambda pk=pk: ended_job(pk), timeout=180, message=f"job {pk} to end") for pk in ids]
    assert [job.state for job in jobs] == [JobState.COMPLETED] * 6, [job.state_reason for job in jobs]
    assert len({job.scheduler_id for job in jobs}) == 6 and all(job.scheduler_id.isdigit() for job in jobs)
    for job in jobs:
        states = list(job.events.order_by("pk").values_list("to_state", flat=True))
        assert states[:3] == ["queued", "submitting", "pending"] and states[-1] == "completed"
        assert set(LedgerEntry.objects.filter(job=job).values_list("kind", flat=True)) >= {"reserve", "settle"}
    # The same key again records nothing more and answers the same jobs.
    again = client.post("/api/v1/jobs/batch/", json.dumps({"jobs": bodies}), content_type="application/json",
                        headers={"Authorization": f"Bearer {secret}", "Idempotency-Key": "bulk-on-slurm"})
    assert again.status_code == 200 and [job["id"] for job in again.json()["jobs"]] == ids
    assert Job.objects.count() == 6
