"""The tracker and the ledger on AWS's recorded answers: a cloud job's states as AWS reports them one poll after
another, and its cost settled from its attempts (price × (stoppedAt − startedAt) × nodes, every attempt), in
the budget's unit. The job is submitted to moto first; then the very boto3 client the tracker uses answers
from the recordings in tests/backends/fixtures/aws_batch/ through botocore's Stubber."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest
from botocore.stub import Stubber

from portal.budgets.models import LedgerEntry
from portal.clusters.connect import backend_for
from portal.jobs import tracking
from portal.jobs.models import Job, JobState
from tests.cloud.test_cloud_jobs import submitted

pytestmark = pytest.mark.django_db
FIXTURES = Path(__file__).parents[1] / "backends" / "fixtures" / "aws_batch"


def polled(job: Job, fixture: str) -> list[str]:
    """Track the job once per recorded answer; its state after each."""
    batch = backend_for(job.cluster).aws.batch  # the client every backend of this cluster shares
    text = (FIXTURES / fixture).read_text().replace("4c7ac6d4-7e3b-4b58-9a0e-2f6d1c3e5a10", job.scheduler_id)
    answers = json.loads(text)["answers"]
    states = []
    with Stubber(batch) as stubber:
        for answer in answers:
            stubber.add_response("describe_jobs", answer, {"jobs": [job.scheduler_id]})
            tracking.track_cluster(job.cluster_id)
            states.append(Job.objects.get(pk=job.pk).state)
        stubber.assert_no_pending_responses()
    return states


def ledger(job: Job) -> dict[str, Decimal]:
    return dict(LedgerEntry.objects.filter(job=job).values_list("kind", "amount"))


def test_a_cloud_job_moves_through_the_states_aws_reports_and_is_settled_for_the_time_it_ran(aws_site):
    job = submitted(aws_site, walltime="02:00:00")
    assert polled(job, "lifecycle-succeeded.json") == ["pending", "pending", "running", "running", "completed"]
    job.refresh_from_db()
    assert job.elapsed_seconds == 90 * 60 and job.exit_code == 0
    assert [e.to_state for e in job.events.all()] == ["queued", "submitting", "pending", "running", "completed"]
    # 1 node × 1.5 h × 32.7726 USD/h × 150 JPY/USD, against a reservation of the whole 2 h
    assert ledger(job) == {"reserve": Decimal("9831.7800"), "settle": Decimal("7373.8350"), "release": Decimal("9831.7800")}


def test_a_spot_interruption_is_retried_and_both_attempts_are_charged(aws_site):
    job = submitted(aws_site, hardware=aws_site.g5, walltime="02:00:00")
    assert polled(job, "spot-interrupted-then-succeeded.json") == ["running", "running", "running", "completed"]
    job.refresh_from_db()
    assert job.state_reason == "1 attempt(s) lost to Spot interruption and retried"
    assert job.elapsed_seconds == 100 * 60
    assert ledger(job)["settle"] == Decimal("112.7500")  # 100 min × 0.4510 USD/h × 150


def test_a_job_aws_stopped_at_its_walltime_ends_timed_out_and_is_charged_its_walltime(aws_site):
    job = submitted(aws_site, walltime="02:00:00")
    assert polled(job, "timed-out.json") == [JobState.TIMED_OUT]
    assert ledger(job)["settle"] == Decimal("9831.7800")


def test_a_multi_node_job_is_charged_for_every_node(aws_site):
    job = submitted(aws_site, nodes=2, walltime="01:00:00", launcher="torchrun")
    assert polled(job, "multinode-succeeded.json") == ["completed"]
    assert ledger(job)["settle"] == Decimal("4915.8900")  # 2 nodes × 0.5 h × 32.7726 × 150


def test_a_job_cancelled_before_it_started_costs_nothing(aws_site):
    job = submitted(aws_site)
    Job.objects.filter(pk=job.pk).update(cancel_requested_at=job.submitted_at)
    assert polled(job, "cancelled-while-runnable.json") == ["cancelled"]
    assert ledger(job)["settle"] == Decimal("0.0000")
