"""A request with a hub token acts as the hub user's portal account, as the real hub says, whatever the client says.

The portal is live_server (a real HTTP server); the hub is the real JupyterHub of tests/hub/conftest.py, whose users
make their own tokens on it.
"""

from __future__ import annotations

import time

import pytest
import requests

from tests.hub.conftest import notebook

pytestmark = [pytest.mark.hub, pytest.mark.django_db(transaction=True)]

FORGED_HEADERS = {"X-JupyterHub-User": "alice", "X-Forwarded-User": "alice", "Remote-User": "alice",
                  "X-Remote-User": "alice", "X-Kakehashi-User": "alice"}


def call(live_server, method: str, path: str, token: str | None, **kwargs) -> requests.Response:
    headers = {**({"Authorization": f"token {token}"} if token else {}), **kwargs.pop("headers", {})}
    return requests.request(method, f"{live_server.url}/api/v1/{path}", headers=headers, timeout=30, **kwargs)


def job_body(**fields) -> dict:
    return {"project": "vision", "name": "from-lab", "hardware": "local-cpu", "walltime": "00:10:00",
            "notebook": notebook(), "parameters": {"lr": 0.5}, **fields}


def test_a_hub_token_acts_as_the_portal_account_with_the_hub_users_name(live_server, hub_portal):
    token = hub_portal.hub.token("alice")
    me = call(live_server, "GET", "me/", token)
    assert me.status_code == 200, me.text
    assert me.json()["username"] == "alice"
    projects = call(live_server, "GET", "projects/", token).json()["results"]
    assert [p["slug"] for p in projects] == ["vision"]


def test_a_hub_token_may_submit_and_the_job_is_its_users(live_server, hub_portal):
    from portal.jobs.models import Job

    answer = call(live_server, "POST", "jobs/", hub_portal.hub.token("alice"), json=job_body())
    assert answer.status_code == 201, answer.text
    job = Job.objects.get(pk=answer.json()["id"])
    assert job.user == hub_portal.alice and job.project == hub_portal.project
    assert job.kind == Job.Kind.NOTEBOOK and job.parameters == {"lr": 0.5}


def test_a_token_of_bob_cannot_submit_as_alice_whatever_the_body_and_headers_say(live_server, hub_portal):
    from portal.jobs.models import Job

    bob = hub_portal.hub.token("bob")
    forged = call(live_server, "POST", "jobs/", bob, json=job_body(user="alice", username="alice", owner="alice"),
                  headers=FORGED_HEADERS)
    # Project "vision" is alice's: for bob it does not exist.
    assert forged.status_code == 404, forged.text
    assert forged.json()["field"] == "project"
    assert call(live_server, "GET", "me/", bob, headers=FORGED_HEADERS).json()["username"] == "bob"
    # In his own project the job is recorded as bob's, not as the name he sent.
    own = call(live_server, "POST", "jobs/", bob, json=job_body(project="nlp", user="alice"), headers=FORGED_HEADERS)
    assert own.status_code == 201, own.text
    assert own.json()["user"] == "bob"
    assert list(Job.objects.values_list("user__username", flat=True)) == ["bob"]


def test_alices_jobs_are_not_bobs_to_see_or_cancel(live_server, hub_portal):
    alice, bob = hub_portal.hub.token("alice"), hub_portal.hub.token("bob")
    job_id = call(live_server, "POST", "jobs/", alice, json=job_body()).json()["id"]
    assert call(live_server, "GET", f"jobs/{job_id}/", bob).status_code == 404
    assert call(live_server, "POST", f"jobs/{job_id}/cancel/", bob).status_code == 404
    assert job_id not in [j["id"] for j in call(live_server, "GET", "jobs/", bob).json()["results"]]
    assert job_id in [j["id"] for j in call(live_server, "GET", "jobs/", alice).json()["results"]]


def test_a_token_the_hub_does_not_know_is_refused_with_401(live_server, hub_portal):
    for token in ("0123456789abcdef0123456789abcdef", "not-a-token"):
        answer = call(live_server, "GET", "projects/", token)
        assert answer.status_code == 401, answer.text
        assert answer.json()["code"] == "hub_token_refused"
        assert "does not accept this token" in answer.json()["detail"]
    malformed = call(live_server, "GET", "projects/", None, headers={"Authorization": "token a b"})
    assert malformed.status_code == 401 and malformed.json()["code"] == "token_malformed"


def test_a_hub_token_without_access_to_the_portal_is_refused(live_server, hub_portal):
    narrow = hub_portal.hub.token("alice", scopes=["read:users:name!user"])
    answer = call(live_server, "GET", "me/", narrow)
    assert answer.status_code == 401
    assert "access:services!service=kakehashi" in answer.json()["detail"]


def test_a_hub_user_without_a_portal_account_is_told_so(live_server, hub_portal):
    from portal.jobs.models import Job

    carol = hub_portal.hub.token("carol")
    answer = call(live_server, "POST", "jobs/", carol, json=job_body(project="vision"))
    assert answer.status_code == 403
    assert answer.json()["code"] == "no_portal_account"
    assert "'carol' has no Kakehashi account" in answer.json()["detail"]
    assert Job.objects.count() == 0


def test_an_admin_mapping_decides_which_account_a_hub_user_is(live_server, hub_portal):
    from portal.hub.models import HubUserMapping

    carol, alice = hub_portal.hub.token("carol"), hub_portal.hub.token("alice")
    HubUserMapping.objects.create(hub_username="carol", user=hub_portal.alice, note="carol is alice's hub name")
    assert call(live_server, "GET", "me/", carol).json()["username"] == "alice"
    # A mapped account is reached only through its mapping: the hub user who merely shares its name is not alice.
    refused = call(live_server, "GET", "me/", alice)
    assert refused.status_code == 403 and refused.json()["code"] == "no_portal_account"


def test_the_admin_command_lists_the_hubs_users_and_the_account_each_signs_in_as(hub_portal):
    from io import StringIO

    from django.core.management import call_command

    from portal.hub.models import HubUserMapping

    HubUserMapping.objects.create(hub_username="bob", user=hub_portal.mallory)
    out = StringIO()
    call_command("hub_accounts", stdout=out)  # with the service's own token, as the hub's service role allows
    assert out.getvalue().splitlines() == [
        "hub user  portal account  matched by",
        "alice     alice           same name",
        "bob       mallory         mapping",
        "carol     —               none",
    ]


def test_a_token_revoked_on_the_hub_stops_working_once_the_short_cache_expires(live_server, hub_portal, settings):
    settings.KAKEHASHI_HUB_TOKEN_CACHE_SECONDS = 1
    token = hub_portal.hub.token("alice")
    assert call(live_server, "GET", "me/", token).status_code == 200
    hub_portal.hub.revoke("alice", token)
    time.sleep(1.5)
    assert call(live_server, "GET", "me/", token).status_code == 401


def test_an_unreachable_hub_is_a_503_not_a_refusal(live_server, hub_portal, settings):
    with socketless_port() as port:
        settings.KAKEHASHI_HUB_API_URL = f"http://127.0.0.1:{port}/hub/api"
        answer = call(live_server, "GET", "me/", "0123456789abcdef0123456789abcdef")
    assert answer.status_code == 503
    assert answer.json()["code"] == "hub_unavailable" and "could not be reached" in answer.json()["detail"]


class socketless_port:
    """A local port nothing listens on (bound, never listening, for the duration)."""

    def __enter__(self) -> int:
        import socket

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        return self.sock.getsockname()[1]

    def __exit__(self, *exc) -> None:
        self.sock.close()
