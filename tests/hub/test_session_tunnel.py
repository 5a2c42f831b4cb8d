"""A session on a cluster whose compute nodes the hub cannot reach (cluster option session_tunnel), end to end on
real components: the portal (live_server), the real JupyterHub with KakehashiSpawner and configurable-http-proxy, a
Celery worker, the tunnel process (`manage.py session_tunnels`) and the test cluster's Slurm and sshd, through which
the tunnel carries the hub's connections as alice's own cluster account (docs/decisions/0056); in Chromium, a cell
runs on the node through the tunnel (its kernel's websockets included)."""

from __future__ import annotations

import pytest
import requests

from tests.conftest import listening, wait_for
from tests.hub.conftest import hub_server
from tests.hub.test_hub_browser import hub_login
from tests.hub.test_sessions import LAB, api, ready_session
from tests.hub.test_sessions_browser import run_a_cell_in_lab

pytestmark = [pytest.mark.hub, pytest.mark.browser, pytest.mark.cluster, pytest.mark.worker,
              pytest.mark.django_db(transaction=True)]


def test_a_session_on_a_cluster_whose_nodes_the_hub_cannot_reach_opens_through_a_tunnel_that_outlives_a_crash_and_closes_when_stopped(
        new_page, sessions_site, live_server, live_worker, session_tunnels):
    from portal.clusters.models import Cluster
    from portal.jobs.models import Job, JobState
    from portal.sessions.models import SessionTunnel

    site, hub = sessions_site, sessions_site.hub
    site.live_url = live_server.url
    cluster = Cluster.objects.get(slug="slurm-test")
    cluster.options = {**cluster.options, "session_tunnel": True}
    cluster.save()

    answer = api(site, site.alice, "POST", "sessions/", {
        "project": "vision", "hardware": "slurm-a100x1", "software": LAB, "walltime": "10m", "name": "tunnelled"})
    assert answer.status_code == 202, answer.text
    session = ready_session("tunnelled")
    tunnel = wait_for(lambda: SessionTunnel.objects.filter(session=session, closed_at__isnull=True).first(), timeout=30,
                      message="the session's tunnel open")

    # The hub is given the tunnel's port on the portal's side, not the node's address.
    detail = api(site, site.alice, "GET", f"sessions/{session.job_id}/").json()
    assert detail["server_url"] == f"http://127.0.0.1:{tunnel.port}" != session.url
    wait_for(lambda: (hub_server(hub, "alice", "tunnelled") or {}).get("ready"), timeout=120,
             message="the hub's server ready")
    assert hub_server(hub, "alice", "tunnelled")["url"] == "/user/alice/tunnelled/"

    # A request through the hub's proxy reaches JupyterLab, carried by the tunnel (its count of connections grows).
    token = hub.token("alice")
    headers = {"Authorization": f"token {token}"}
    carried = SessionTunnel.objects.get(pk=session.pk).connections
    lab = requests.get(f"{hub.url}/user/alice/tunnelled/lab", headers=headers, timeout=30)
    assert lab.status_code == 200 and "JupyterLab" in lab.text
    wait_for(lambda: SessionTunnel.objects.get(pk=session.pk).connections > carried, timeout=10,
             message="the tunnel counting the proxy's connection")
    # In Chromium: Lab through the hub and the tunnel; a cell runs on the node over the kernel's websocket.
    page = new_page()
    hub_login(page, hub.url, "alice")
    run_a_cell_in_lab(page, hub, session, Job.objects.get(pk=session.job_id))
    page.close()

    # The tunnel process crashes: the hub's route leads nowhere, though the node's server is up. Started again, it
    # listens on the same port, and the same route reaches the same Lab: the session was not lost.
    session_tunnels.kill()
    assert not listening(tunnel.port)
    assert requests.get(f"{hub.url}/user/alice/tunnelled/api/status", headers=headers, timeout=30).status_code != 200
    assert requests.get(f"{session.url}/user/alice/tunnelled/api/status", headers=headers, timeout=30).status_code == 200
    session_tunnels.start()
    wait_for(lambda: requests.get(f"{hub.url}/user/alice/tunnelled/api/status", headers=headers, timeout=30).ok,
             timeout=30, message="the route through the restarted tunnel")
    assert SessionTunnel.objects.get(pk=session.pk).port == tunnel.port
    assert Job.objects.get(pk=session.job_id).state == JobState.RUNNING

    # Stopping the session closes its tunnel: the port no longer listens.
    assert api(site, site.alice, "POST", f"sessions/{session.job_id}/stop/").status_code == 200
    wait_for(lambda: Job.objects.filter(pk=session.job_id, state=JobState.CANCELLED).exists(), timeout=120,
             message="the session's job cancelled")
    wait_for(lambda: not listening(tunnel.port), timeout=10, message="the tunnel's port closed")
    assert SessionTunnel.objects.get(pk=session.pk).closed_at is not None
