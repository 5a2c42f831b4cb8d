"""Session tunnels (docs/decisions/0056): the rules as plain functions, and the tunnel process's reconciliation on
the test database with the test cluster's real login node (alice's account, host keys pinned). End to end with the
hub: tests/hub/test_session_tunnel.py."""

from __future__ import annotations

import socket
import subprocess
import threading
from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from portal.sessions.tunnels import (
    Target,
    candidate_ports,
    check_option,
    plan,
    port_range,
    tunnel_warning,
    url_of,
    wants_tunnel,
)
from tests.conftest import ROOT, TunnelProcess, listening, portal_process_env, wait_for


def target(session_id: int, port: int = 40000, host: str = "10.0.0.5") -> Target:
    return Target(session_id, cluster_id=1, account_id=7, host=host, port=port)


def test_only_the_json_value_true_asks_for_a_tunnel_and_anything_else_but_a_boolean_is_refused():
    assert wants_tunnel({"session_tunnel": True})
    assert not any(wants_tunnel(o) for o in ({}, None, {"session_tunnel": "true"}, {"session_tunnel": 1},
                                             {"session_tunnel": False}))
    assert check_option({"session_tunnel": True}) == check_option({}) == ""
    assert "true or false" in check_option({"session_tunnel": "yes"})


def test_a_reconciliation_opens_what_is_wanted_closes_what_ended_and_records_closed_what_a_crashed_process_left():
    wanted = {1: target(1), 2: target(2)}
    held = {1: target(1), 3: target(3)}
    assert plan(wanted, held, recorded={1, 3, 4}) == plan(wanted, held, recorded=[4, 3, 1])
    done = plan(wanted, held, recorded={1, 3, 4})
    assert (done.close, done.open, done.forget) == ([3], [2], [3, 4])
    # A freshly started process holds nothing: every wanted tunnel opens again, none is forgotten.
    assert plan(wanted, {}, recorded={1, 2}) == type(done)(close=[], open=[1, 2], forget=[])
    # A held tunnel never leads anywhere but its session's reported address: a differing one is reopened.
    moved = plan({1: target(1, port=40001)}, {1: target(1)}, recorded={1})
    assert (moved.close, moved.open, moved.forget) == ([1], [1], [])


def test_a_new_tunnel_takes_a_free_port_of_the_range_and_a_recorded_one_only_its_own():
    ports = port_range("20000-20004")
    assert ports == range(20000, 20005) and port_range("20500") == range(20500, 20501)
    assert candidate_ports(ports, taken={20000, 20002}) == [20001, 20003, 20004]
    assert candidate_ports(ports, taken={20000}, recorded=20000) == [20000]
    assert candidate_ports(ports, taken=set(ports)) == []
    for bad in ("", "abc", "0-10", "20010-20000", "65000-70000"):
        with pytest.raises(ValueError, match="KAKEHASHI_SESSION_TUNNEL_PORTS"):
            port_range(bad)


def test_the_hub_is_given_an_address_it_can_route_to():
    assert url_of("127.0.0.1", 20001) == "http://127.0.0.1:20001"
    assert url_of("tunnels.internal", 20001) == "http://tunnels.internal:20001"
    assert url_of("::1", 20001) == "http://[::1]:20001"


def test_the_tunnel_process_counts_as_running_for_30_seconds_after_it_was_last_seen_or_three_of_its_intervals():
    seen = datetime(2026, 12, 1, 9, 0, 0, tzinfo=UTC)
    assert tunnel_warning("Tsubame", seen, now=seen + timedelta(seconds=30)) == ""
    late = tunnel_warning("Tsubame", seen, now=seen + timedelta(seconds=31))
    assert late.startswith("Session tunnels: the tunnel process (manage.py session_tunnels) has not been seen since "
                           "2026-12-01 ")
    assert late.endswith("; sessions on Tsubame cannot be reached")
    assert tunnel_warning("Tsubame", None, now=seen) == ("Session tunnels: the tunnel process (manage.py "
                                                         "session_tunnels) has never run; sessions on Tsubame cannot "
                                                         "be reached")
    # One that reconciles every 20 s is still running 50 s after it was seen (its next two were merely not due).
    assert tunnel_warning("Tsubame", seen, now=seen + timedelta(seconds=50), interval=20) == ""
    assert tunnel_warning("Tsubame", seen, now=seen + timedelta(seconds=61), interval=20) != ""


# ------------------------------------------------------------------------ the reconciliation, on real components


@pytest.fixture
def node_server():
    """A "session's server" on 127.0.0.1, as the login node reaches it: answers each chunk in upper case."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve():
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return
            with client:
                while data := client.recv(4096):
                    client.sendall(data.upper())

    threading.Thread(target=serve, daemon=True).start()
    yield server.getsockname()[1]
    server.close()


def ask(port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(b"lab?")
        return conn.recv(100)


def reported_session(site, name: str, cluster_slug: str, port: int):
    from portal.crypto import token_digest
    from portal.jobs.actions.submit import submit_job
    from portal.jobs.actions.validation import JobRequest
    from portal.jobs.models import Job, JobState
    from portal.sessions.actions import default_app
    from portal.sessions.models import Session

    hardware = site.clusters[cluster_slug].hardware.order_by("pk").first()
    job = submit_job(site.alice, JobRequest(project=site.project, name=name, script="true", hardware=hardware)).job
    Job.objects.filter(pk=job.pk).update(kind=Job.Kind.SESSION, state=JobState.RUNNING)
    return Session.objects.create(job=job, app=default_app(), hub_user="alice", server_name=name,
                                  token_digest=token_digest(f"token-{name}"), host="127.0.0.1", port=port,
                                  ready_at=timezone.now())


@pytest.mark.cluster
@pytest.mark.django_db
def test_the_tunnel_process_opens_a_tunnel_per_reported_session_takes_it_over_after_a_restart_and_closes_it_when_the_session_ends(
        hpc_site, node_server, transport_for):
    from portal.jobs.models import Job, JobState
    from portal.sessions.models import Session, SessionTunnel
    from portal.sessions.tunnel_keeper import TunnelKeeper
    from portal.sessions.tunnels import server_url

    cluster = hpc_site.clusters["slurm-test"]
    cluster.options = {**cluster.options, "session_tunnel": True}
    cluster.save()
    tunnelled = reported_session(hpc_site, "tunnelled", "slurm-test", node_server)
    direct = reported_session(hpc_site, "direct", "pbs-test", node_server)

    keeper = TunnelKeeper()
    try:
        keeper.step()
        tunnel = SessionTunnel.objects.get(session=tunnelled)
        assert set(keeper.held) == {tunnelled.pk}  # the other cluster's nodes are reached directly
        assert not SessionTunnel.objects.filter(session=direct).exists()
        assert server_url(Session.objects.get(pk=direct.pk)) == f"http://127.0.0.1:{node_server}"
        assert server_url(Session.objects.get(pk=tunnelled.pk)) == f"http://127.0.0.1:{tunnel.port}"
        assert ask(tunnel.port) == b"LAB?"  # through the login node, as alice
        keeper.step()
        assert SessionTunnel.objects.get(session=tunnelled).connections == 1
    finally:
        keeper.close_all()  # the process stops (or crashes): the tunnel stays recorded open
    assert not listening(tunnel.port) and SessionTunnel.objects.get(session=tunnelled).closed_at is None

    again = TunnelKeeper()
    try:
        again.step()
        assert SessionTunnel.objects.get(session=tunnelled).port == tunnel.port
        assert ask(tunnel.port) == b"LAB?"
        Job.objects.filter(pk=tunnelled.pk).update(state=JobState.CANCELLED)
        again.step()
        assert not listening(tunnel.port) and again.held == {}
        assert SessionTunnel.objects.get(session=tunnelled).closed_at is not None
        assert server_url(Session.objects.get(pk=tunnelled.pk)) == ""
    finally:
        again.close_all()


# ------------------------------------------------------- one tunnel process per site, and whether it runs, on real processes


def tunnels_run() -> subprocess.CompletedProcess:
    """`manage.py session_tunnels` run to its end (a refusal ends it at once)."""
    return subprocess.run(TunnelProcess.COMMAND, cwd=ROOT, env=portal_process_env(), capture_output=True, text=True,
                          timeout=120)


@pytest.fixture
def tunnel_processes(transactional_db, tmp_path):
    """Tunnel processes started by a test on the test database (their rows committed: they are processes of their
    own), each stopped at its end."""
    started: list[TunnelProcess] = []

    def start(name: str) -> TunnelProcess:
        process = TunnelProcess(tmp_path / f"{name}.log")
        started.append(process)
        process.start()
        return process

    yield start
    for process in started:
        process.stop()


def test_a_second_tunnel_process_refuses_to_start_while_one_runs_and_starts_once_the_first_is_killed(
        tunnel_processes):
    from portal.sessions.models import TunnelHeartbeat

    first = tunnel_processes("first")
    second = tunnels_run()
    assert second.returncode == 1, second.stdout + second.stderr
    assert (f"another session_tunnels process holds the site's tunnels (pid {first.proc.pid} on "
            f"{socket.gethostname()} since ") in second.stderr
    assert second.stderr.rstrip().endswith(": stop it first") and "Traceback" not in second.stderr
    assert "listening" not in second.stdout  # it never took a port
    assert TunnelHeartbeat.objects.get().pid == first.proc.pid  # nor the heartbeat

    # SIGKILL: no clean-up runs in the first; what it held is released with it, and a new one takes over at once.
    first.kill()
    third = tunnel_processes("third")
    wait_for(lambda: TunnelHeartbeat.objects.get().pid == third.proc.pid, timeout=10,
             message="the new process's heartbeat")
    third.stop()
    assert third.proc.returncode == 0 and "session tunnels: stopped" in third.log.read_text()
    again = tunnel_processes("again")  # a clean stop releases the lock too
    assert again.proc.poll() is None


def test_the_site_page_says_sessions_on_a_tunnelled_cluster_cannot_be_reached_until_the_tunnel_process_runs(
        client, admin_user, tunnel_processes):
    from portal.clusters.models import Cluster, Kind
    from portal.sessions.models import TunnelHeartbeat

    Cluster.objects.create(slug="tsubame", name="Tsubame", kind=Kind.SLURM, login_host="login.example.org",
                           host_keys="x", options={"session_tunnel": True})
    Cluster.objects.create(slug="abci", name="ABCI", kind=Kind.SLURM, login_host="abci.example.org", host_keys="x")
    client.force_login(admin_user)

    def warnings() -> list[str]:
        page = client.get(reverse("site-admin")).content.decode()
        return [line for line in page.splitlines() if "data-tunnel-warning" in line]

    never = warnings()
    assert len(never) == 1 and 'data-tunnel-warning="tsubame"' in never[0]
    assert ("Session tunnels: the tunnel process (manage.py session_tunnels) has never run; sessions on Tsubame "
            "cannot be reached.") in never[0]

    keeper = tunnel_processes("keeper")
    assert warnings() == []  # its heartbeat is written before it says it listens
    keeper.kill()
    seen = TunnelHeartbeat.objects.get().seen_at
    assert warnings() == []  # killed a moment ago: not yet "not seen" (30 s)
    TunnelHeartbeat.objects.update(seen_at=seen - timedelta(seconds=31))  # ... 31 s later
    gone = warnings()
    assert len(gone) == 1 and ("Session tunnels: the tunnel process (manage.py session_tunnels) has not been seen "
                               f"since {timezone.localtime(seen - timedelta(seconds=31)):%Y-%m-%d %H:%M:%S}") in gone[0]


@pytest.mark.django_db
def test_the_sessions_page_warns_of_a_tunnelled_cluster_only_while_the_tunnel_process_is_not_seen(client, local_site):
    from portal.crypto import token_digest
    from portal.jobs.models import Job, JobState
    from portal.sessions.actions import default_app
    from portal.sessions.models import Session, TunnelHeartbeat
    from portal.sessions.tunnel_keeper import TunnelKeeper

    cluster = local_site.cluster
    job = Job.objects.create(project=local_site.project, user=local_site.alice, cluster=cluster,
                             hardware=local_site.hardware, name="lab", kind=Job.Kind.SESSION, state=JobState.RUNNING,
                             walltime_seconds=600)
    Session.objects.create(job=job, app=default_app(), hub_user="alice", server_name="lab",
                           token_digest=token_digest("token-lab"))
    client.force_login(local_site.alice)

    def warning() -> str:
        page = client.get(reverse("session-list")).content.decode()
        return next((line for line in page.splitlines() if "data-tunnel-warning" in line), "")

    assert warning() == ""  # its cluster's nodes are reached directly
    cluster.options = {**cluster.options, "session_tunnel": True}
    cluster.save()
    assert "has never run; sessions on This machine cannot be reached: ask your site's administrators." in warning()
    TunnelKeeper().step()  # a reconciliation: the heartbeat
    assert warning() == ""
    TunnelHeartbeat.objects.update(seen_at=timezone.now() - timedelta(minutes=5))
    assert "has not been seen since" in warning()
    Job.objects.filter(pk=job.pk).update(state=JobState.CANCELLED)
    assert warning() == ""  # an ended session is not to be reached: nothing to warn of


def test_a_tunnel_process_whose_lock_connection_is_cut_takes_the_lock_again_and_a_second_one_still_refuses(
        tunnel_processes):
    from django.db import connection

    from portal.sessions.models import TunnelHeartbeat

    first = tunnel_processes("first")
    name = f"session_tunnels {first.proc.pid}@{socket.gethostname()}"

    def lock_backend() -> int | None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pid FROM pg_stat_activity WHERE application_name = %s", [name])
            row = cursor.fetchone()
        return row[0] if row else None

    cut = wait_for(lock_backend, timeout=10, message="the lock's connection")
    with connection.cursor() as cursor:  # as a restart of PostgreSQL would: the lock goes with the connection
        cursor.execute("SELECT pg_terminate_backend(%s)", [cut])
    wait_for(lambda: lock_backend() not in (None, cut), timeout=10, message="the lock taken again")
    seen = TunnelHeartbeat.objects.get().seen_at
    wait_for(lambda: TunnelHeartbeat.objects.get().seen_at > seen, timeout=10, message="reconciliations going on")
    assert first.proc.poll() is None
    second = tunnels_run()
    assert second.returncode == 1 and "stop it first" in second.stderr
