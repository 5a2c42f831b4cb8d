"""Through the API only, with the real worker: submit, watch the job finish, read its output, cancel another."""

from __future__ import annotations

import pytest

from tests.api.conftest import job_body
from tests.conftest import wait_for

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def _state(api, job_id: int) -> str:
    return api.get(f"/api/v1/jobs/{job_id}/").json()["state"]


def _read_all(api, job_id: int, stream: str) -> str:
    """Follow the log like a client does: pass next_offset back until the answer says complete."""
    text, offset = "", 0

    def step():
        nonlocal text, offset
        chunk = api.get(f"/api/v1/jobs/{job_id}/logs/", {"stream": stream, "offset": offset}).json()
        text += chunk["data"]
        offset = chunk["next_offset"]
        return chunk["complete"]

    wait_for(step, timeout=60, interval=0.3, message=f"{stream} to be complete")
    return text


def test_a_job_submitted_through_the_api_runs_and_its_logs_come_back(alice_api, local_site, live_worker):
    response = alice_api.post("/api/v1/jobs/", job_body(name="api-e2e", script="echo hello from the api\n"
                                                        "echo warn >&2\nsleep 1\n"),
                              headers={"Idempotency-Key": "e2e-1"})
    assert response.status_code == 201, response.content
    job_id = response.json()["id"]
    wait_for(lambda: _state(alice_api, job_id) in {"completed", "failed"}, timeout=90, message="the job to end")
    job = alice_api.get(f"/api/v1/jobs/{job_id}/").json()
    assert job["state"] == "completed" and job["exit_code"] == 0, job
    assert job["scheduler_id"] and job["cost"]["unit"] == "points"
    assert "hello from the api" in _read_all(alice_api, job_id, "stdout")
    assert _read_all(alice_api, job_id, "stderr").strip() == "warn"
    budget = alice_api.get("/api/v1/projects/vision/budget/").json()
    assert budget["reserved"] == "0.0000" and float(budget["spent"]) == float(job["cost"]["amount"])


def test_a_running_job_cancelled_through_the_api_ends_cancelled(alice_api, local_site, live_worker):
    job_id = alice_api.post("/api/v1/jobs/", job_body(name="api-long", script="echo started\nsleep 120\n")).json()["id"]
    wait_for(lambda: _state(alice_api, job_id) == "running", timeout=90, message="the job to run")
    response = alice_api.post(f"/api/v1/jobs/{job_id}/cancel/")
    assert response.status_code == 202 and response.json()["cancel_requested_at"]
    wait_for(lambda: _state(alice_api, job_id) == "cancelled", timeout=60, message="the job to be cancelled")
