"""What the hub's spawn page asks the portal while a person chooses a session: their choices, then the estimate and the
budget left, or the words of the refusal Start would meet. Nothing is recorded; a person sees only their own
projects' choices; through the hub's proxy (/services/kakehashi/…) only the estimate is answered, and only to a token.
"""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.cluster, pytest.mark.django_db]

CHOICE = {"project": "vision", "software": "jupyterlab-4-6", "hardware": "slurm-a100x8", "walltime": "24:00:00"}


def _post(client, path: str, token: str, body: dict):
    return client.post(path, body, content_type="application/json", headers={"Authorization": f"Bearer {token}"})


def test_the_choices_are_the_persons_own_projects_and_the_hardware_each_may_use_for_a_session(client, hpc_site, issue):
    answer = client.get("/api/v1/sessions/choices/", headers={"Authorization": f"Bearer {issue(hpc_site.alice, 'read')}"})
    assert answer.status_code == 200, answer.content
    choices = answer.json()
    assert [p["slug"] for p in choices["projects"]] == ["vision"]
    assert [a["slug"] for a in choices["apps"]] == ["jupyterlab"]
    assert "jupyterlab-4-6" in [s["slug"] for s in choices["software"]]
    hardware = {h["slug"]: h for h in choices["hardware"]}
    assert hardware["slurm-a100x8"]["projects"] == ["vision"] and hardware["slurm-a100x8"]["cluster"]

    outsider = client.get("/api/v1/sessions/choices/",
                          headers={"Authorization": f"Bearer {issue(hpc_site.mallory, 'read')}"}).json()
    assert [p["slug"] for p in outsider["projects"]] == ["nlp"]
    assert "slurm-a100x8" not in {h["slug"] for h in outsider["hardware"]}


def test_the_estimate_says_the_price_and_the_budget_left_and_records_nothing(client, hpc_site, issue):
    from portal.jobs.models import Job

    token = issue(hpc_site.alice, "read")  # it records nothing: reading is enough
    answer = _post(client, "/api/v1/sessions/estimate/", token, CHOICE)
    assert answer.status_code == 200, answer.content
    # 3 points per node-hour for 24 hours, out of the strict 100 points.
    assert answer.json() == {"estimate": {"amount": "72.0000", "unit": "points", "text": "72.00 points"},
                             "budget_left": {"amount": "100.0000", "unit": "points", "text": "100.00 points"},
                             "strict": True, "fits": True}
    assert not Job.objects.exists()


def test_the_estimate_says_why_a_strict_budget_would_refuse_the_session_before_start(client, hpc_site, issue):
    hpc_site.budget.amount = 50
    hpc_site.budget.save()
    answer = _post(client, "/api/v1/sessions/estimate/", issue(hpc_site.alice, "read"), CHOICE)
    assert answer.status_code == 402
    assert answer.json()["detail"].startswith(
        "This session needs an estimated 72.00 points but project vision has only 50.00 points left")


def test_the_estimate_of_hardware_on_no_session_cluster_or_of_another_project_is_refused_clearly(client, hpc_site,
                                                                                                 issue):
    token = issue(hpc_site.mallory, "read")
    answer = _post(client, "/api/v1/sessions/estimate/", token, {**CHOICE, "project": "vision"})
    assert answer.status_code == 404 and "vision" in answer.json()["detail"]
    answer = _post(client, "/api/v1/sessions/estimate/", issue(hpc_site.alice, "read"), {**CHOICE, "walltime": "soon"})
    assert answer.status_code == 400 and "walltime 'soon' is not a duration" in answer.json()["detail"]


def test_through_the_hubs_proxy_only_the_estimate_is_answered_and_only_to_a_token(client, hpc_site, issue):
    token = issue(hpc_site.alice, "read")
    answer = _post(client, "/services/kakehashi/api/v1/sessions/estimate/", token, CHOICE)
    assert answer.status_code == 200 and answer.json()["estimate"]["text"] == "72.00 points"
    assert _post(client, "/services/other/api/v1/sessions/estimate/", token, CHOICE).status_code == 404
    # A browser's own portal cookie is no token: a page on the hub cannot spend it (CSRF).
    client.force_login(hpc_site.alice)
    csrf = client.__class__(enforce_csrf_checks=True)
    csrf.force_login(hpc_site.alice)
    assert csrf.post("/services/kakehashi/api/v1/sessions/estimate/", CHOICE,
                     content_type="application/json").status_code == 403
