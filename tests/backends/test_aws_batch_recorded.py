"""What the AWS Batch backend makes of AWS's answers that moto cannot give: every state on the way, Spot
interruptions and retries, timeouts, cancels, multi-node jobs, and prices. The answers (fixtures/aws_batch/,
sources in its README) reach real boto3 clients through botocore's Stubber, which checks each against the
service model."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import boto3
import pytest
from botocore.stub import Stubber

from backends import aws_pricing
from backends.aws_batch import AWSBatchBackend, BatchClients
from backends.base import State

FIXTURES = Path(__file__).parent / "fixtures" / "aws_batch"
JOB = "4c7ac6d4-7e3b-4b58-9a0e-2f6d1c3e5a10"


def answers(name: str) -> list[dict]:
    return json.loads((FIXTURES / name).read_text())["answers"]


def client(service: str, region: str = "ap-northeast-1"):
    return boto3.client(service, region_name=region, aws_access_key_id="recorded", aws_secret_access_key="recorded")


def replay(name: str):
    """A backend whose describe_jobs answers are the recorded ones, in order; the stubber to check it used them."""
    batch = client("batch")
    stubber = Stubber(batch)
    for answer in answers(name):
        stubber.add_response("describe_jobs", answer, {"jobs": [JOB]})
    stubber.activate()
    return AWSBatchBackend(BatchClients(batch=batch), {"region": "ap-northeast-1"}), stubber


def test_a_job_is_pending_while_submitted_or_runnable_running_once_starting_and_completed_when_it_succeeds():
    backend, stubber = replay("lifecycle-succeeded.json")
    seen = [backend.statuses([JOB])[JOB] for _ in range(5)]
    assert [s.state for s in seen] == [State.PENDING, State.PENDING, State.RUNNING, State.RUNNING, State.COMPLETED]
    assert seen[1].reason == "runnable"
    stubber.assert_no_pending_responses()
    record = backend.final_records([JOB])[JOB]  # from the last describe_jobs: no second call
    assert (record.state, record.exit_code, record.nodes) == (State.COMPLETED, 0, 1)
    assert record.started_at == datetime(2026, 11, 23, 8, 3, tzinfo=UTC)
    assert record.ended_at == datetime(2026, 11, 23, 9, 33, tzinfo=UTC)
    assert record.elapsed_seconds == 90 * 60


def test_a_payload_that_exits_3_fails_with_exit_code_3():
    backend, _ = replay("failed-exit-3.json")
    record = backend.final_records([JOB])[JOB]
    assert (record.state, record.exit_code, record.elapsed_seconds) == (State.FAILED, 3, 600)
    assert record.reason == "exit code 3: Essential container in task exited"


def test_an_attempt_stopped_by_its_timeout_is_timed_out_not_failed():
    backend, _ = replay("timed-out.json")
    record = backend.final_records([JOB])[JOB]
    assert record.state == State.TIMED_OUT and record.elapsed_seconds == 120 * 60
    assert "Job attempt duration exceeded timeout" in record.reason


def test_a_spot_interruption_sends_the_job_back_to_waiting_and_every_attempt_is_billed():
    backend, _ = replay("spot-interrupted-then-succeeded.json")
    states = [backend.statuses([JOB])[JOB].state for _ in range(4)]
    assert states == [State.RUNNING, State.PENDING, State.RUNNING, State.COMPLETED]
    record = backend.final_records([JOB])[JOB]
    assert record.state == State.COMPLETED
    assert record.elapsed_seconds == (40 + 60) * 60  # the lost attempt's 40 minutes ran on a paid instance too
    assert record.started_at == datetime(2026, 11, 23, 8, 5, tzinfo=UTC)  # the first attempt's start
    assert record.reason == "1 attempt(s) lost to Spot interruption and retried"
    assert record.raw["attempts"] == "2"


def test_a_job_whose_every_spot_attempt_was_taken_back_fails_saying_so():
    backend, _ = replay("spot-interrupted-every-attempt.json")
    record = backend.final_records([JOB])[JOB]
    assert record.state == State.FAILED and record.exit_code is None
    assert record.reason.startswith("the instance was taken back (Spot interruption) on the last attempt")
    assert "2 attempt(s) lost to Spot interruption" in record.reason
    assert record.elapsed_seconds == (20 + 30 + 10) * 60


def test_a_job_cancelled_while_it_waited_is_cancelled_and_cost_nothing():
    backend, _ = replay("cancelled-while-runnable.json")
    record = backend.final_records([JOB])[JOB]
    assert (record.state, record.elapsed_seconds, record.started_at) == (State.CANCELLED, None, None)


def test_a_multi_node_job_is_billed_for_its_nodes():
    backend, _ = replay("multinode-succeeded.json")
    record = backend.final_records([JOB])[JOB]
    assert (record.state, record.nodes, record.elapsed_seconds) == (State.COMPLETED, 2, 30 * 60)


def test_cancel_asks_cancel_job_while_queued_and_terminate_job_once_running():
    for fixture, index, operation in (("lifecycle-succeeded.json", 1, "cancel_job"),
                                      ("lifecycle-succeeded.json", 3, "terminate_job")):
        batch = client("batch")
        stubber = Stubber(batch)
        answer = answers(fixture)[index]
        stubber.add_response("describe_jobs", answer, {"jobs": [JOB]})
        stubber.add_response(operation, {}, {"jobId": JOB, "reason": "Cancelled through Kakehashi"})
        if operation == "cancel_job":  # it is looked at again: a job that started meanwhile ignores cancel_job
            stubber.add_response("describe_jobs", answer, {"jobs": [JOB]})
        with stubber:
            AWSBatchBackend(BatchClients(batch=batch), {}).cancel(JOB)
        stubber.assert_no_pending_responses()


def test_on_demand_prices_come_from_the_pricing_api_and_spot_prices_from_the_highest_zone():
    pricing = client("pricing", aws_pricing.PRICING_REGION)
    with Stubber(pricing) as stubber:
        recorded = json.loads((FIXTURES / "pricing-get-products-p4d-tokyo.json").read_text())
        stubber.add_response("get_products", recorded, {
            "ServiceCode": "AmazonEC2", "MaxResults": 10, "Filters": aws_pricing._filters("ap-northeast-1", "p4d.24xlarge")})
        (offer,) = aws_pricing.on_demand_offers(pricing, "ap-northeast-1", ["p4d.24xlarge"])
    assert offer == aws_pricing.Offer("ap-northeast-1", "p4d.24xlarge", "on-demand", Decimal("44.4096000000"), "USD")

    ec2 = client("ec2")
    history = json.loads((FIXTURES / "ec2-spot-price-history-g5-tokyo.json").read_text())
    for entry in history["SpotPriceHistory"]:
        entry["Timestamp"] = datetime.fromisoformat(entry["Timestamp"])
    now = datetime(2026, 11, 23, 8, tzinfo=UTC)
    with Stubber(ec2) as stubber:
        stubber.add_response("describe_spot_price_history", history, {
            "InstanceTypes": ["g5.xlarge"], "ProductDescriptions": ["Linux/UNIX"], "StartTime": now, "MaxResults": 1000})
        (spot,) = aws_pricing.spot_offers(ec2, "ap-northeast-1", ["g5.xlarge"], now)
    assert (spot.market, spot.price_per_hour) == ("spot", Decimal("0.451000"))


def test_a_price_list_without_an_hourly_price_gives_no_offer():
    assert aws_pricing.parse_products([json.dumps({"product": {"attributes": {"instanceType": "x"}}, "terms": {}})],
                                      "ap-northeast-1", "x") is None


@pytest.mark.parametrize("reason", ["Stopped by Kakehashi's reconciler: past its walltime of 3600 s"])
def test_a_job_the_reconciler_stopped_for_its_walltime_is_timed_out(reason):
    from backends.aws_batch_parse import parse_record

    job = answers("cancelled-while-runnable.json")[0]["jobs"][0] | {"statusReason": reason}
    assert parse_record(job).state == State.TIMED_OUT
