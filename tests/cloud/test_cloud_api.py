"""A cloud job through the API with the real worker: priced in the budget's unit before anything is recorded,
submitted, handed to AWS Batch (moto), tracked to its end and settled in the same ledger as HPC jobs."""

from __future__ import annotations

from decimal import Decimal

import pytest

from portal.budgets.models import LedgerEntry
from portal.jobs.models import Job
from tests.api.conftest import job_body
from tests.conftest import wait_for

CLOUD = {"hardware": "aws-p4d", "software": "pytorch", "walltime": "02:00:00"}


@pytest.mark.django_db
def test_a_dry_run_on_aws_shows_the_job_definition_and_the_estimate_in_the_budgets_unit(alice_api, aws_site):
    response = alice_api.post("/api/v1/jobs/", job_body(**CLOUD, nodes=2, launcher="torchrun", dry_run=True))
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["estimate"]["unit"] == "JPY" and Decimal(body["estimate"]["amount"]) == Decimal("19663.5600")
    assert '#AWSBATCH   "type": "multinode",' in body["script"]
    assert body["submit_command"].startswith("aws batch submit-job")
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_a_cloud_job_the_budget_cannot_cover_is_refused_with_402(alice_api, aws_site):
    response = alice_api.post("/api/v1/jobs/", job_body(**{**CLOUD, "walltime": "10:00:00"}))
    assert response.status_code == 402 and response.json()["code"] == "budget_exceeded"
    assert "JPY" in response.json()["detail"]


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_a_cloud_job_submitted_through_the_api_is_dispatched_tracked_and_settled(alice_api, aws_site, live_worker,
                                                                                 moto_aws):
    response = alice_api.post("/api/v1/jobs/", job_body(name="cloud-e2e", **CLOUD))
    assert response.status_code == 201, response.content
    job_id = response.json()["id"]

    def ended():
        job = alice_api.get(f"/api/v1/jobs/{job_id}/").json()
        return job if job["state"] in {"completed", "failed", "cancelled", "timed_out"} else None

    job = wait_for(ended, timeout=90, message="the cloud job to end")
    assert job["state"] == "completed", job
    described = moto_aws.client("batch").describe_jobs(jobs=[job["scheduler_id"]])["jobs"][0]
    assert described["jobName"] == Job.objects.get(pk=job_id).scheduler_name  # it reached AWS Batch, once
    assert described["tags"]["kakehashi:project"] == "vision" and described["tags"]["kakehashi:user"] == "alice"
    assert len(moto_aws.client("batch").list_jobs(jobQueue="kakehashi-aws-p4d-24xlarge-on-demand",
                                                  jobStatus="SUCCEEDED")["jobSummaryList"]) == 1
    entries = dict(LedgerEntry.objects.filter(job_id=job_id).values_list("kind", "amount"))
    assert entries["reserve"] == Decimal("9831.7800") and entries["release"] == entries["reserve"]
    assert "settle" in entries and job["cost"]["unit"] == "JPY"
    budget = alice_api.get("/api/v1/projects/vision/budget/").json()
    assert Decimal(budget["reserved"]) == 0
