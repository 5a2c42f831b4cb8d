"""`kakehashi session start|list|stop`, the installed command against the portal, the sessions hub and Slurm."""

from __future__ import annotations

import pytest

from tests.cli.conftest import cli_home, kakehashi_script, kh  # noqa: F401 - the CLI tests' fixtures, here too
from tests.conftest import wait_for
from tests.hub.conftest import hub_server

pytestmark = [pytest.mark.hub, pytest.mark.cluster, pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def test_a_researcher_starts_lists_and_stops_a_session_from_the_command_line(
        kh, sessions_site, live_server, live_worker):  # noqa: F811
    from portal.api.tokens import issue_token
    from portal.jobs.models import Job, JobState

    token = issue_token(sessions_site.alice, name="cli", scopes=["read", "submit"])[1]
    env = {"KAKEHASHI_URL": live_server.url, "KAKEHASHI_TOKEN": token}
    started = kh("session", "start", "--project", "vision", "--hardware", "slurm-a100x1", "--software",
                 "jupyterlab-4-6", "--walltime", "10m", "--name", "cli1", env=env)
    assert started.code == 0, started.err
    assert "Starting session cli1" in started.out and "/user/alice/cli1/" in started.out

    def listed_running():
        result = kh("session", "list", env=env)
        return result.out if "running" in result.out and "/user/alice/cli1/" in result.out else None

    table = wait_for(listed_running, timeout=180, interval=1, message="the session running, with its address")
    # As a person would: once the hub serves it (stopped in the moment between, the hub waits out its http_timeout
    # for a server that is gone before it forgets it).
    wait_for(lambda: (hub_server(sessions_site.hub, "alice", "cli1") or {}).get("ready"), timeout=120,
             message="the hub's server ready")
    job = Job.objects.get(kind=Job.Kind.SESSION)
    assert str(job.pk) in table and "slurm-a100x1" in table

    stopped = kh("session", "stop", str(job.pk), env=env)
    assert stopped.code == 0 and f"Stopping session {job.pk} (cli1" in stopped.out
    wait_for(lambda: Job.objects.filter(pk=job.pk, state=JobState.CANCELLED).exists(), timeout=120,
             message="the session cancelled")
    wait_for(lambda: hub_server(sessions_site.hub, "alice", "cli1") is None, timeout=60, message="the hub dropped it")
    refused = kh("session", "stop", env=env)
    assert refused.code == 2 and "needs the session's id" in refused.err
