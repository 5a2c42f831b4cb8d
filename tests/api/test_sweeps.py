"""Sweeps through the API: a job per point, all reserved or none, as one scheduler array where there are arrays."""

from __future__ import annotations

import pytest

from portal.budgets.models import LedgerEntry
from portal.jobs.models import Job, JobGroup
from tests.api.conftest import Api, job_body

pytestmark = pytest.mark.django_db

SWEEPS = "/api/v1/sweeps/"


def test_a_sweep_on_the_local_cluster_is_a_job_per_point_each_reserved(alice_api):
    response = alice_api.post(SWEEPS, job_body(name="lr", script='echo "$LR"\n', sweep={"LR": [0.1, 0.01, 0.001]}))
    assert response.status_code == 201, response.content
    answer = response.json()
    group = JobGroup.objects.get()
    assert answer["id"] == group.pk and response["Location"] == f"{SWEEPS}{group.pk}/"
    assert answer["array"] is False  # the local backend has no arrays
    assert [job["parameters"] for job in answer["jobs"]] == [{"LR": 0.1}, {"LR": 0.01}, {"LR": 0.001}]
    assert [job["array_index"] for job in answer["jobs"]] == [None, None, None]
    assert answer["estimate"] == {"amount": "5.0001", "unit": "points", "text": "5.00 points"}  # 3 × 1.6667
    assert LedgerEntry.objects.filter(kind="reserve", job__group=group).count() == 3
    assert [j["id"] for j in alice_api.get(f"{SWEEPS}{group.pk}/").json()["jobs"]] == [j["id"] for j in answer["jobs"]]


@pytest.mark.parametrize(("body", "field", "words"), [
    ({"sweep": {"LR": []}}, "sweep", "non-empty list"),
    ({"sweep": {"a b": [1]}}, "sweep", "not a valid name"),
    ({"sweep": {"LR": list(range(101))}}, "sweep", "at most 100"),
    ({"sweep": {"LR": [1]}, "walltime": "abc"}, "walltime", "walltime"),
    ({"sweep": {"LR": [1]}, "array": True}, "sweep", "job by job"),
    ({"sweep": "LR=1"}, "sweep", "dictionary"),
])
def test_a_bad_sweep_is_explained_and_records_nothing(alice_api, body, field, words):
    response = alice_api.post(SWEEPS, job_body(**body))
    assert response.status_code == 400, response.content
    text = response.content.decode()
    assert field in text and words in text
    assert Job.objects.count() == 0 and JobGroup.objects.count() == 0


def test_a_sweep_the_budget_cannot_cover_is_refused_whole(alice_api, local_site):
    local_site.budget.amount = 4  # three points at 1.6667 each need 5.0001
    local_site.budget.save()
    response = alice_api.post(SWEEPS, job_body(sweep={"LR": [1, 2, 3]}))
    assert response.status_code == 402 and response.json()["code"] == "budget_exceeded"
    assert Job.objects.count() == 0 and LedgerEntry.objects.count() == 0


def test_a_sweep_repeated_with_its_idempotency_key_is_recorded_once(alice_api):
    body = job_body(sweep={"LR": [1, 2]})
    first = alice_api.post(SWEEPS, body, headers={"Idempotency-Key": "nightly-2026-11-22"})
    again = alice_api.post(SWEEPS, body, headers={"Idempotency-Key": "nightly-2026-11-22"})
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["created"] is True and again.json()["created"] is False
    assert again.json()["id"] == first.json()["id"] and JobGroup.objects.count() == 1 and Job.objects.count() == 2
    assert LedgerEntry.objects.filter(kind="reserve").count() == 2
    other = alice_api.post(SWEEPS, body, headers={"Idempotency-Key": "nightly-2026-11-23"})
    assert other.status_code == 201 and JobGroup.objects.count() == 2


def test_another_projects_sweep_is_not_found(alice_api, mallory_api):
    group_id = alice_api.post(SWEEPS, job_body(sweep={"LR": [1, 2]})).json()["id"]
    assert mallory_api.get(f"{SWEEPS}{group_id}/").status_code == 404
    assert mallory_api.post(SWEEPS, job_body(sweep={"LR": [1]})).status_code == 404  # "vision" is alice's


def test_a_read_only_token_may_look_at_a_sweep_but_not_submit_one(alice_api, api_as, local_site):
    group_id = alice_api.post(SWEEPS, job_body(sweep={"LR": [1, 2]})).json()["id"]
    reader: Api = api_as(local_site.alice, "read")
    assert reader.get(f"{SWEEPS}{group_id}/").status_code == 200
    assert reader.post(SWEEPS, job_body(sweep={"LR": [1]})).status_code == 403


@pytest.mark.cluster
def test_a_sweep_on_slurm_is_one_array_and_its_dry_run_shows_the_array_script(hpc_site, api_as):
    api = api_as(hpc_site.alice, "read", "submit")
    body = job_body(name="lr", hardware="slurm-a100x1", script='echo "$LR"\n', sweep={"LR": [0.1, 0.2]})
    dry = api.post(SWEEPS, {**body, "dry_run": True})
    assert dry.status_code == 200, dry.content
    assert dry.json()["array"] is True and "#SBATCH --array=1-2" in dry.json()["script"]
    assert Job.objects.count() == 0
    answer = api.post(SWEEPS, body).json()
    assert answer["array"] is True and [job["array_index"] for job in answer["jobs"]] == [1, 2]
    assert {job["script"] for job in answer["jobs"]} == {answer["script"]}
    one_by_one = api.post(SWEEPS, {**body, "array": False}).json()
    assert one_by_one["array"] is False and "--array" not in one_by_one["script"]


def test_cancelling_a_sweep_cancels_each_job_not_ended_and_only_its_owner_may(alice_api, mallory_api, api_as,
                                                                                local_site):
    group_id = alice_api.post(SWEEPS, job_body(sweep={"LR": [1, 2, 3]})).json()["id"]
    done = Job.objects.filter(group_id=group_id).order_by("pk").first()
    Job.objects.filter(pk=done.pk).update(state="completed")  # one point already ended: it stays as it is
    assert mallory_api.post(f"{SWEEPS}{group_id}/cancel/").status_code == 404
    assert api_as(local_site.alice, "read").post(f"{SWEEPS}{group_id}/cancel/").status_code == 403
    assert set(Job.objects.filter(group_id=group_id).values_list("state", flat=True)) == {"completed", "queued"}

    response = alice_api.post(f"{SWEEPS}{group_id}/cancel/")

    assert response.status_code == 202, response.content
    assert [job["state"] for job in response.json()["jobs"]] == ["completed", "cancelled", "cancelled"]
    # Their reservations are given back: a job cancelled before submission cost nothing.
    assert LedgerEntry.objects.filter(kind="release", job__group_id=group_id).count() == 2
