"""A session's server reports its address once, with its own hub token, and nobody can move the route after."""

from __future__ import annotations

import pytest

from portal.crypto import token_digest
from portal.jobs.actions.submit import submit_job
from portal.jobs.actions.validation import JobRequest, SubmitError
from portal.jobs.models import Job
from portal.sessions.actions import checked_hub_env, default_app
from portal.sessions.models import Session

pytestmark = pytest.mark.django_db
URL = "/api/v1/sessions/report/"


@pytest.fixture
def session(local_site):
    job = submit_job(local_site.alice, JobRequest(project=local_site.project, name="lab", script="true",
                                                  hardware=local_site.hardware)).job
    Job.objects.filter(pk=job.pk).update(kind=Job.Kind.SESSION)
    return Session.objects.create(job=job, app=default_app(), hub_user="alice", server_name="lab",
                                  token_digest=token_digest("the-servers-hub-token"), hub_env="encrypted")


def report(client, token: str | None, body: dict):
    headers = {"Authorization": f"token {token}"} if token else {}
    return client.post(URL, body, content_type="application/json", headers=headers)


def test_the_server_reports_once_and_a_second_report_cannot_move_the_route(client, session):
    assert report(client, "the-servers-hub-token", {"host": "10.1.2.3", "port": 45678}).status_code == 204
    session.refresh_from_db()
    assert (session.host, session.port, session.url) == ("10.1.2.3", 45678, "http://10.1.2.3:45678")
    assert session.hub_env == ""  # the hub's variables are forgotten once the node has them
    assert session.job.events.filter(cause="session_ready").count() == 1
    again = report(client, "the-servers-hub-token", {"host": "10.6.6.6", "port": 1234})
    assert again.status_code == 403 and again.json()["code"] == "report_refused"
    session.refresh_from_db()
    assert session.host == "10.1.2.3"


def test_a_report_without_the_servers_token_or_with_a_bad_address_is_refused(client, session):
    assert report(client, None, {"host": "10.1.2.3", "port": 45678}).status_code == 401
    assert report(client, "someone-elses-token", {"host": "10.1.2.3", "port": 45678}).status_code == 403
    for body in ({"host": "10.1.2.3; rm -rf /", "port": 45678}, {"host": "10.1.2.3", "port": 70000},
                 {"host": "$(id)", "port": 80}):
        assert report(client, "the-servers-hub-token", body).status_code in (400, 403), body
    session.refresh_from_db()
    assert session.ready_at is None


def test_the_spawner_must_send_the_token_it_authenticates_with():
    env = {"JUPYTERHUB_API_TOKEN": "mine", "JUPYTERHUB_USER": "alice", "PATH": "/evil", "LD_PRELOAD": "x.so"}
    assert checked_hub_env(env, "mine") == {"JUPYTERHUB_API_TOKEN": "mine", "JUPYTERHUB_USER": "alice"}
    with pytest.raises(SubmitError):
        checked_hub_env(env, "another-servers-token")
