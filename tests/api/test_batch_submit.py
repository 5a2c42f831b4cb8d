"""Bulk submit through the API (issue 28, goal 4): many jobs in one request, each checked, priced, recorded and
reserved as a submit of its own would be, all or none (docs/decisions/0053)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from portal.audit.models import AuditEntry
from portal.budgets.models import LedgerEntry
from portal.jobs.models import Job, JobEvent
from portal.projects.models import Membership, Role
from tests.api.conftest import job_body

pytestmark = pytest.mark.django_db

BATCH = "/api/v1/jobs/batch/"


def _nothing_recorded():
    assert Job.objects.count() == 0
    assert LedgerEntry.objects.count() == 0
    assert JobEvent.objects.count() == 0
    assert AuditEntry.objects.filter(action="job.submit").count() == 0


def test_a_batch_records_each_job_with_its_own_row_event_audit_row_and_reservation(alice_api, local_site):
    bodies = [job_body(name=f"step-{i}", script=f"echo {i}\n", env={"STEP": str(i)}) for i in range(5)]
    response = alice_api.post(BATCH, {"jobs": bodies})
    assert response.status_code == 201, response.content
    answer = response.json()
    assert answer["created"] is True and answer["warnings"] == []
    assert [j["name"] for j in answer["jobs"]] == [f"step-{i}" for i in range(5)]  # in the order sent
    jobs = {job.pk: job for job in Job.objects.all()}
    assert sorted(jobs) == sorted(j["id"] for j in answer["jobs"])
    for i, shown in enumerate(answer["jobs"]):
        job = jobs[shown["id"]]
        assert shown["state"] == "queued" and shown["url"].endswith(f"/api/v1/jobs/{job.pk}/")
        assert shown["estimate"] == {"amount": "1.6667", "unit": "points", "text": "1.67 points"}
        assert job.user == local_site.alice and job.script == f"echo {i}\n" and job.env == {"STEP": str(i)}
        assert list(job.events.values_list("to_state", flat=True)) == ["queued"]
        assert LedgerEntry.objects.get(job=job).amount == Decimal("1.6667")
        assert AuditEntry.objects.filter(action="job.submit", target_id=str(job.pk)).count() == 1
    assert len({job.uuid for job in jobs.values()}) == 5


def test_a_batch_a_strict_budget_cannot_cover_whole_records_nothing_and_is_402_saying_why(alice_api, local_site):
    local_site.budget.amount = Decimal("25")  # two one-hour jobs (10 points each) fit, three do not
    local_site.budget.save()
    response = alice_api.post(BATCH, {"jobs": [job_body(name=f"big-{i}", walltime="01:00:00") for i in range(3)]})
    assert response.status_code == 402, response.content
    error = response.json()
    assert error["code"] == "budget_exceeded"
    assert "These 3 jobs need an estimated 30.00 points" in error["detail"]
    assert "only 25.00 points left" in error["detail"]
    _nothing_recorded()
    assert alice_api.post(BATCH, {"jobs": [job_body(name=f"big-{i}", walltime="01:00:00")
                                           for i in range(2)]}).status_code == 201


def test_the_same_idempotency_key_returns_the_batch_recorded_first_and_records_nothing_more(alice_api):
    bodies = [job_body(name=f"k-{i}") for i in range(3)]
    first = alice_api.post(BATCH, {"jobs": bodies}, headers={"Idempotency-Key": "nightly-2026-11-27"})
    again = alice_api.post(BATCH, {"jobs": bodies}, headers={"Idempotency-Key": "nightly-2026-11-27"})
    assert first.status_code == 201 and again.status_code == 200
    assert again.json()["created"] is False
    assert [j["id"] for j in again.json()["jobs"]] == [j["id"] for j in first.json()["jobs"]]
    assert Job.objects.count() == 3 and LedgerEntry.objects.count() == 3
    # A single submit with the same header is a job of its own: the batch's keys are its own.
    single = alice_api.post("/api/v1/jobs/", job_body(), headers={"Idempotency-Key": "nightly-2026-11-27"})
    assert single.status_code == 201 and Job.objects.count() == 4


def test_a_job_in_a_project_the_caller_is_not_in_records_nothing_of_the_batch(local_site, mallory_api):
    Membership.objects.create(user=local_site.mallory, project=local_site.project, role=Role.VIEWER)
    bodies = [job_body(project="nlp", name="mine"), job_body(project="vision", name="not-mine")]
    response = mallory_api.post(BATCH, {"jobs": bodies})  # mallory owns nlp and may only view vision
    assert response.status_code == 403, response.content
    assert "vision" in response.json()["detail"]
    _nothing_recorded()
    # A project mallory cannot see at all is not found, and nothing is recorded either.
    Membership.objects.filter(user=local_site.mallory, project=local_site.project).delete()
    response = mallory_api.post(BATCH, {"jobs": bodies})
    assert response.status_code == 404 and response.json()["field"] == "project"
    _nothing_recorded()


def test_a_batch_of_several_projects_reserves_in_each_projects_budget(local_site, api_as):
    Membership.objects.create(user=local_site.alice, project=local_site.other, role=Role.MEMBER)
    api = api_as(local_site.alice, "read", "submit")
    response = api.post(BATCH, {"jobs": [job_body(project="vision", name="v"), job_body(project="nlp", name="n")]})
    assert response.status_code == 201, response.content
    assert {j["project"] for j in response.json()["jobs"]} == {"vision", "nlp"}
    assert set(Job.objects.values_list("project__slug", flat=True)) == {"vision", "nlp"}
    assert LedgerEntry.objects.filter(job__project=local_site.project).count() == 1  # nlp has no budget


def test_one_invalid_job_refuses_the_batch_naming_that_job_and_its_field(alice_api):
    bodies = [job_body(name="fine"), job_body(name="too-long", walltime="99:00:00")]
    response = alice_api.post(BATCH, {"jobs": bodies})
    assert response.status_code == 400, response.content
    error = response.json()
    assert error["field"] == "jobs[1].walltime" and error["detail"].startswith("job 1 (too-long):")
    _nothing_recorded()


def test_a_malformed_batch_is_a_400_that_names_the_field(alice_api):
    assert alice_api.post(BATCH, {"jobs": []}).status_code == 400
    response = alice_api.post(BATCH, {"jobs": [job_body(), {"project": "vision"}]})
    assert response.status_code == 400 and "name" in response.json()["field"]
    assert alice_api.post(BATCH, {"jobs": [job_body()] * 501}).status_code == 400
    _nothing_recorded()


def test_a_read_token_cannot_submit_a_batch(local_site, api_as):
    response = api_as(local_site.alice, "read").post(BATCH, {"jobs": [job_body()]})
    assert response.status_code == 403 and response.json()["code"] == "insufficient_scope"
    _nothing_recorded()

