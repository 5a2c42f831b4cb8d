"""Jobs through the API: submit, dry run, idempotency, refusals, reading, cancelling, logs — and isolation."""

from __future__ import annotations

from decimal import Decimal

import pytest

from portal.audit.models import AuditEntry
from portal.budgets.models import LedgerEntry
from portal.jobs.models import Job, JobOutput, JobState
from portal.projects.models import Membership, Role
from tests.api.conftest import job_body, notebook

pytestmark = pytest.mark.django_db

JOBS = "/api/v1/jobs/"


def _nothing_recorded():
    assert Job.objects.count() == 0
    assert LedgerEntry.objects.count() == 0
    assert AuditEntry.objects.filter(action="job.submit").count() == 0


# ------------------------------------------------------------------------------------------------ submit


def test_submit_records_the_job_reserves_its_estimate_and_answers_201(alice_api, local_site):
    response = alice_api.post(JOBS, job_body())
    assert response.status_code == 201, response.content
    answer = response.json()
    job = Job.objects.get()
    assert answer["id"] == job.pk and response["Location"] == f"/api/v1/jobs/{job.pk}/"
    assert answer["state"] == "queued" and answer["scheduler_id"] == ""
    assert answer["project"] == "vision" and answer["hardware"] == "local-cpu" and answer["nodes"] == 1
    assert answer["walltime"] == "00:10:00" and answer["exit_code"] is None and answer["cost"] is None
    # 10 points per node-hour for 10 minutes.
    assert answer["estimate"] == {"amount": "1.6667", "unit": "points", "text": "1.67 points"}
    assert answer["script"] == job.rendered_script and answer["script"].startswith("#!")
    assert answer["payload"] == "echo hello\n"
    assert answer["created"] is True and answer["dry_run"] is False
    assert job.user == local_site.alice
    reserve = LedgerEntry.objects.get(job=job)
    assert reserve.kind == "reserve" and reserve.amount == Decimal("1.6667")


def test_a_dry_run_renders_and_estimates_but_records_and_reserves_nothing(alice_api):
    response = alice_api.post(JOBS, job_body(dry_run=True, walltime="1h"))
    assert response.status_code == 200, response.content
    answer = response.json()
    assert answer["dry_run"] is True and answer["id"] is None and answer["state"] == "draft"
    assert answer["estimate"] == {"amount": "10.0000", "unit": "points", "text": "10.00 points"}
    assert answer["script"].startswith("#!") and answer["payload"] == "echo hello\n"
    assert answer["budget"] == {"available": "100.0000", "after": "90.0000", "unit": "points", "fits": True,
                                "text": {"available": "100.00", "after": "90.00"}}
    _nothing_recorded()


def test_the_same_idempotency_key_returns_the_first_job_and_a_new_key_a_new_job(alice_api):
    first = alice_api.post(JOBS, job_body(), headers={"Idempotency-Key": "run-42"})
    again = alice_api.post(JOBS, job_body(name="changed"), headers={"Idempotency-Key": "run-42"})
    assert first.status_code == 201 and again.status_code == 200
    assert again.json()["id"] == first.json()["id"] and again.json()["created"] is False
    assert Job.objects.count() == 1 and LedgerEntry.objects.count() == 1
    other = alice_api.post(JOBS, job_body(), headers={"Idempotency-Key": "run-43"})
    assert other.status_code == 201 and other.json()["id"] != first.json()["id"]
    assert Job.objects.count() == 2


def test_an_overlong_idempotency_key_is_refused(alice_api):
    response = alice_api.post(JOBS, job_body(), headers={"Idempotency-Key": "k" * 200})
    assert response.status_code == 400 and response.json()["field"] == "Idempotency-Key"
    _nothing_recorded()


def test_a_notebook_is_submitted_with_its_parameters(alice_api):
    response = alice_api.post(JOBS, {**job_body(script=""), "notebook": notebook(), "parameters": {"lr": 0.01, "epochs": 3}})
    assert response.status_code == 201, response.content
    job = Job.objects.get()
    assert job.kind == "notebook" and job.parameters == {"lr": 0.01, "epochs": 3}
    assert "papermill" in response.json()["payload"]


@pytest.mark.parametrize(
    ("nb", "message"),
    [
        ('{"cells": [', "not valid JSON"),  # the .ipynb text, cut short
        ({"hello": "world"}, "not a valid Jupyter notebook"),
        ([1, 2, 3], "must be a Jupyter notebook"),
    ],
)
def test_something_that_is_not_a_notebook_is_refused_with_a_message(alice_api, nb, message):
    response = alice_api.post(JOBS, {**job_body(script=""), "notebook": nb})
    assert response.status_code == 400, response.content
    assert response.json()["field"] == "notebook" and message in response.json()["detail"]
    _nothing_recorded()


def test_a_body_that_is_not_json_is_refused(alice_api):
    response = alice_api.client.post(JOBS, "{not json", content_type="application/json",
                                     headers={"Authorization": f"Bearer {alice_api.token}"})
    assert response.status_code == 400 and response.json()["code"] == "parse_error"
    _nothing_recorded()


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"walltime": "abc"}, "walltime", "is not a duration"),
        ({"walltime": "99:00:00"}, "walltime", "is too long"),
        ({"name": "$(reboot)"}, "name", "job name"),
        ({"name": "a;b"}, "name", "job name"),
        ({"script": "   "}, "script", "script is empty"),
        ({"nodes": 5}, "nodes", "at most 1 node"),
        ({"nodes": 0}, "nodes", "at least 1"),
        ({"nodes": "many"}, "nodes", "valid integer"),
        ({"launcher": "srun"}, "launcher", "not a valid choice"),
        ({"env": {"BAD NAME": "x"}}, "env", ""),
        ({"hardware": None}, "hardware", "choose the hardware"),
    ],
)
def test_invalid_input_is_a_400_that_names_the_field(alice_api, fields, field, message):
    response = alice_api.post(JOBS, job_body(**fields))
    assert response.status_code == 400, response.content
    error = response.json()
    assert error["field"] == field and message in error["detail"] and error["code"]
    _nothing_recorded()


def test_a_missing_required_field_is_named(alice_api):
    body = job_body()
    del body["name"]
    response = alice_api.post(JOBS, body)
    assert response.status_code == 400
    assert response.json()["field"] == "name" and response.json()["detail"].startswith("name:")


def test_a_budget_refusal_is_402_and_says_how_much_is_left(alice_api, local_site):
    local_site.budget.amount = Decimal("5")
    local_site.budget.save()
    response = alice_api.post(JOBS, job_body(walltime="01:00:00"))  # needs 10 points
    assert response.status_code == 402, response.content
    error = response.json()
    assert error["code"] == "budget_exceeded"
    assert "10.00 points" in error["detail"] and "only 5.00 points left" in error["detail"]
    _nothing_recorded()
    # The dry run tells beforehand, without a refusal.
    dry = alice_api.post(JOBS, job_body(walltime="01:00:00", dry_run=True)).json()
    assert dry["budget"]["fits"] is False and dry["budget"]["after"] == "-5.0000"


def test_a_viewer_can_read_but_not_submit(local_site, make_user, api_as):
    viewer = make_user("victor")
    Membership.objects.create(user=viewer, project=local_site.project, role=Role.VIEWER)
    api = api_as(viewer, "read", "submit")
    assert api.get(JOBS, {"project": "vision"}).status_code == 200
    response = api.post(JOBS, job_body())
    assert response.status_code == 403
    assert response.json()["code"] == "permission_denied" and "role does not allow" in response.json()["detail"]
    _nothing_recorded()


def test_a_read_token_cannot_submit(local_site, api_as):
    response = api_as(local_site.alice, "read").post(JOBS, job_body())
    assert response.status_code == 403
    assert response.json()["code"] == "insufficient_scope" and "'submit'" in response.json()["detail"]
    _nothing_recorded()


def test_a_submit_token_cannot_read_but_an_admin_token_can_do_both(local_site, api_as):
    assert api_as(local_site.alice, "submit").get(JOBS).status_code == 403
    admin = api_as(local_site.alice, "admin")
    assert admin.post(JOBS, job_body()).status_code == 201
    assert admin.get(JOBS).status_code == 200


def test_a_project_you_are_not_in_is_not_found(mallory_api):
    response = mallory_api.post(JOBS, job_body())  # "vision" is alice's project
    assert response.status_code == 404 and response.json()["field"] == "project"
    _nothing_recorded()


@pytest.mark.parametrize(("fields", "field"), [({"hardware": "no-such-hw"}, "hardware"), ({"software": "nope"}, "software")])
def test_unknown_hardware_or_software_is_not_found(alice_api, fields, field):
    response = alice_api.post(JOBS, job_body(**fields))
    assert response.status_code == 404 and response.json()["field"] == field
    _nothing_recorded()


# ------------------------------------------------------------------------------------------- read & list


@pytest.fixture
def alice_job(alice_api) -> Job:
    assert alice_api.post(JOBS, job_body(name="mine")).status_code == 201
    return Job.objects.get(name="mine")


def test_jobs_are_listed_newest_first_and_filtered(alice_api, alice_job):
    alice_api.post(JOBS, job_body(name="second"))
    listing = alice_api.get(JOBS).json()
    assert listing["count"] == 2 and [j["name"] for j in listing["results"]] == ["second", "mine"]
    assert alice_api.get(JOBS, {"state": "queued"}).json()["count"] == 2
    assert alice_api.get(JOBS, {"state": "running,completed"}).json()["count"] == 0
    assert alice_api.get(JOBS, {"project": "vision", "limit": 1}).json()["results"][0]["name"] == "second"
    bad = alice_api.get(JOBS, {"state": "sleeping"})
    assert bad.status_code == 400 and bad.json()["field"] == "state"
    assert alice_api.get(JOBS, {"project": "nlp"}).status_code == 404  # mallory's project


def test_one_job(alice_api, alice_job):
    answer = alice_api.get(f"{JOBS}{alice_job.pk}/").json()
    assert answer["id"] == alice_job.pk and answer["name"] == "mine" and answer["state"] == "queued"
    assert answer["url"].endswith(f"/jobs/{alice_job.pk}/")


def test_a_job_reads_the_same_in_its_submit_answer_its_page_and_the_list_as_drf_itself_renders_it(alice_api, alice_job):
    # Answers are built from fields bound once per class (portal/api/serializers.py AnswerSerializer): the same keys
    # and values as DRF's own rendering, down to the absolute links, for a job with outputs too.
    from django.test import RequestFactory
    from rest_framework import serializers as drf

    from portal.api.serializers import AnswerSerializer, JobSerializer, SubmissionSerializer, bound_once
    from portal.jobs.actions.submit import Submission
    from portal.jobs.models import JobArtifact

    submitted = alice_api.post(JOBS, job_body(name="again")).json()
    JobArtifact.objects.create(job=alice_job, path="model.pt", size=3, stored_name="artifacts/model.pt")
    one = alice_api.get(f"{JOBS}{alice_job.pk}/").json()
    assert one["outputs"][0]["path"] == "model.pt" and one["outputs"][0]["url"].startswith("http://testserver/")
    job_keys = set(one) - {"gpu"}  # a job's own page adds its GPU samples
    assert set(submitted) == job_keys | {"dry_run", "created", "warnings", "budget", "places"}
    assert set(alice_api.get(JOBS).json()["results"][0]) == job_keys

    context = {"request": RequestFactory().get("/"), "dry_run": False,
               "submission": Submission.recorded(Job.objects.get(name="again"))}
    for job in Job.objects.all():
        for answer in (SubmissionSerializer, JobSerializer):
            ours = answer(job, context=context)
            assert ours.data == drf.Serializer.to_representation(answer(context=context), job)
    assert bound_once(SubmissionSerializer) is not None and bound_once(JobSerializer) is not None
    # A nested serializer reads its parent's context: such a class is answered by DRF's own path.
    assert bound_once(type("Nested", (AnswerSerializer,), {"inner": JobSerializer()})) is None


def test_another_projects_job_is_not_found_to_read_cancel_or_log(mallory_api, alice_job):
    assert mallory_api.get(JOBS).json()["count"] == 0
    for response in (
        mallory_api.get(f"{JOBS}{alice_job.pk}/"),
        mallory_api.post(f"{JOBS}{alice_job.pk}/cancel/"),
        mallory_api.get(f"{JOBS}{alice_job.pk}/logs/"),
    ):
        assert response.status_code == 404, response.content
        assert response.json()["code"] == "not_found"
    alice_job.refresh_from_db()
    assert alice_job.state == JobState.QUEUED and alice_job.cancel_requested_at is None


def test_a_job_that_does_not_exist_is_not_found(alice_api):
    assert alice_api.get(f"{JOBS}999999/").status_code == 404


# ------------------------------------------------------------------------------------------------ cancel


def test_cancelling_a_queued_job_ends_it_at_once_and_releases_its_reservation(alice_api, alice_job):
    response = alice_api.post(f"{JOBS}{alice_job.pk}/cancel/")
    assert response.status_code == 200, response.content
    assert response.json()["state"] == "cancelled"
    assert "release" in set(LedgerEntry.objects.filter(job=alice_job).values_list("kind", flat=True))
    budget = alice_api.get("/api/v1/projects/vision/budget/").json()
    assert budget["reserved"] == "0.0000" and budget["available"] == "100.0000"
    again = alice_api.post(f"{JOBS}{alice_job.pk}/cancel/")
    assert again.status_code == 409 and again.json()["code"] == "already_ended"


def test_cancelling_a_running_job_is_accepted_for_the_worker(alice_api, alice_job):
    Job.objects.filter(pk=alice_job.pk).update(state=JobState.RUNNING, scheduler_id="4242")
    response = alice_api.post(f"{JOBS}{alice_job.pk}/cancel/")
    assert response.status_code == 202
    assert response.json()["state"] == "running" and response.json()["cancel_requested_at"]


def test_a_viewer_and_a_read_token_cannot_cancel(local_site, alice_job, make_user, api_as):
    viewer = make_user("victor")
    Membership.objects.create(user=viewer, project=local_site.project, role=Role.VIEWER)
    assert api_as(viewer, "read", "submit").post(f"{JOBS}{alice_job.pk}/cancel/").status_code == 403
    assert api_as(local_site.alice, "read").post(f"{JOBS}{alice_job.pk}/cancel/").status_code == 403
    alice_job.refresh_from_db()
    assert alice_job.state == JobState.QUEUED


# -------------------------------------------------------------------------------------------------- logs


def test_logs_are_read_from_an_offset(alice_api, alice_job):
    JobOutput.objects.create(job=alice_job, stream="stdout", data=b"line one\nline two\n", complete=True)
    first = alice_api.get(f"{JOBS}{alice_job.pk}/logs/").json()
    assert first == {"stream": "stdout", "offset": 0, "next_offset": 18, "data": "line one\nline two\n",
                     "complete": True, "truncated": False, "job_state": "queued"}
    rest = alice_api.get(f"{JOBS}{alice_job.pk}/logs/", {"offset": 9}).json()
    assert rest["data"] == "line two\n" and rest["next_offset"] == 18


def test_logs_in_progress_ask_a_worker_for_more_and_never_split_a_character(alice_api, alice_job, monkeypatch):
    asked = []
    monkeypatch.setattr("portal.api.views.request_output_refresh", lambda job: asked.append(job.pk))
    # "日本" is 6 bytes; the portal has fetched 4 of them so far.
    JobOutput.objects.create(job=alice_job, stream="stderr", data="日本".encode()[:4], complete=False)
    answer = alice_api.get(f"{JOBS}{alice_job.pk}/logs/", {"stream": "stderr"}).json()
    assert answer["data"] == "日" and answer["next_offset"] == 3 and answer["complete"] is False
    assert asked == [alice_job.pk]


def test_logs_of_a_job_without_output_yet(alice_api, alice_job):
    answer = alice_api.get(f"{JOBS}{alice_job.pk}/logs/").json()
    assert answer["data"] == "" and answer["next_offset"] == 0 and answer["complete"] is False


def test_logs_parameters_are_checked(alice_api, alice_job):
    bad_stream = alice_api.get(f"{JOBS}{alice_job.pk}/logs/", {"stream": "stdin"})
    assert bad_stream.status_code == 400 and bad_stream.json()["field"] == "stream"
    bad_offset = alice_api.get(f"{JOBS}{alice_job.pk}/logs/", {"offset": "-1"})
    assert bad_offset.status_code == 400 and bad_offset.json()["field"] == "offset"
