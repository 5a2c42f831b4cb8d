"""Interactive sessions end to end on real components: the portal (live_server), a real JupyterHub whose spawner is
KakehashiSpawner, configurable-http-proxy, a Celery worker, and the test cluster's Slurm, where JupyterLab
(jupyterhub-singleuser from the cluster's jupyterlab/4.6 module) runs as alice's own cluster account.
"""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
import requests
from django.utils import timezone

from tests.conftest import wait_for
from tests.hub.conftest import ARTIFACTS, hub_server
from tests.samples.test_idle_end_to_end import gpus, say  # noqa: F401 - the nvidia-smi stand-in's fixture, here too

pytestmark = [pytest.mark.hub, pytest.mark.cluster, pytest.mark.worker, pytest.mark.django_db(transaction=True)]

LAB = "jupyterlab-4-6"


def api(site, user, method: str, path: str, body: dict | None = None) -> requests.Response:
    from portal.api.tokens import issue_token

    tokens = site.__dict__.setdefault("api_tokens", {})
    if user.pk not in tokens:
        tokens[user.pk] = issue_token(user, name="tests", scopes=["read", "submit"])[1]
    return requests.request(method, f"{site.live_url}/api/v1/{path}", json=body, timeout=30,
                            headers={"Authorization": f"Bearer {tokens[user.pk]}"})


def ready_session(name: str, timeout: float = 180):
    from portal.sessions.models import Session

    def ready():
        session = Session.objects.select_related("job").filter(server_name=name).first()
        ready = session is not None and session.ready_at is not None and session.job.state == "running"
        return session if ready else None

    return wait_for(ready, timeout=timeout, interval=0.5, message=f"session {name} ready")


def routed_session(site, hardware: str, walltime: str, name: str, timeout: float = 60):
    """alice's session started through the API, once its server has reported and the hub routes it."""
    answer = api(site, site.alice, "POST", "sessions/", {
        "project": "vision", "hardware": hardware, "software": LAB, "walltime": walltime, "name": name})
    assert answer.status_code == 202, answer.text
    session = ready_session(name)
    wait_for(lambda: (hub_server(site.hub, "alice", name) or {}).get("ready"), timeout=timeout,
             message="the hub's server")
    return session


def record_timings(clicked, answered, job, session, usable) -> None:
    """Where the time from Start to a usable Lab goes, on this run (test-artifacts/session-timings.txt)."""
    from portal.jobs.models import JobEvent

    accepted = JobEvent.objects.filter(job=job, cause="dispatched", data__has_key="scheduler_id").first()
    steps = [
        ("portal: Start answered (checked, priced, the hub asked)", clicked, answered),
        ("hub → spawner → portal: the session recorded", answered, job.created_at),
        ("portal worker: handed to the scheduler (sbatch answered)", job.created_at, accepted.at),
        ("scheduler and node: started, module loaded, address reported", accepted.at, session.ready_at),
        ("server start and proxy: the hub's route answers", session.ready_at, usable),
    ]
    lines = [f"{(end - start).total_seconds():7.2f} s  {what}" for what, start, end in steps]
    lines.append(f"{(usable - clicked).total_seconds():7.2f} s  Start → usable Lab")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "session-timings.txt").write_text("\n".join(lines) + "\n")


def test_a_session_started_on_the_portal_serves_jupyterlab_from_a_slurm_node_through_the_hub_and_is_settled_when_stopped(
        sessions_site, live_server, live_worker):
    from portal.jobs.models import Job, JobState

    site, hub = sessions_site, sessions_site.hub
    site.live_url = live_server.url
    clicked = timezone.now()
    answer = api(site, site.alice, "POST", "sessions/", {
        "project": "vision", "hardware": "slurm-a100x1", "software": LAB, "walltime": "10m", "name": "lab1"})
    answered = timezone.now()
    assert answer.status_code == 202, answer.text
    assert answer.json()["connect_url"] == f"{hub.url}/user/alice/lab1/"

    session = ready_session("lab1")
    job = session.job
    assert (job.kind, job.cluster.slug, job.user) == (Job.Kind.SESSION, "slurm-test", site.alice)
    assert job.scheduler_id.isdigit()
    assert "session.json" not in job.rendered_script and "JUPYTERHUB_API_TOKEN" not in job.rendered_script

    # The hub's proxy routes the named server to the node; JupyterLab answers there as alice's server.
    wait_for(lambda: (hub_server(hub, "alice", "lab1") or {}).get("ready"), timeout=120, message="the hub's server ready")
    usable = timezone.now()
    record_timings(clicked, answered, job, session, usable)
    token = hub.token("alice")
    status = requests.get(f"{hub.url}/user/alice/lab1/api/status", headers={"Authorization": f"token {token}"},
                          timeout=30)
    assert status.status_code == 200, status.text
    listing = requests.get(f"{session.url}/user/alice/lab1/api/status", headers={"Authorization": f"token {token}"},
                           timeout=30)
    assert listing.status_code == 200  # the proxy's target is the node's own address

    detail = api(site, site.alice, "GET", f"sessions/{job.pk}/").json()
    assert detail["ready"] and detail["state"] == "running" and detail["seconds_left"] <= 600
    assert detail["budget_left"]["unit"] == "points"

    # bob, in the project but not its owner, sees it; he may not stop it (nor may anyone outside the project).
    assert api(site, site.bob, "GET", f"sessions/{job.pk}/").status_code == 200
    assert api(site, site.bob, "POST", f"sessions/{job.pk}/stop/").status_code == 403

    stopped = api(site, site.alice, "POST", f"sessions/{job.pk}/stop/")
    assert stopped.status_code == 200, stopped.text
    job = wait_for(lambda: Job.objects.filter(pk=job.pk, state__in=[JobState.CANCELLED]).first(), timeout=120,
                   message="the session's job cancelled in accounting")
    assert job.cost_amount is not None and job.cost_amount >= Decimal(0)
    assert job.events.filter(cause="session_ready").exists()
    assert job.events.filter(cause="cancelled_by_owner").exists()
    # The hub's poll drops the server once its job has ended.
    wait_for(lambda: hub_server(hub, "alice", "lab1") is None, timeout=60, message="the hub dropped the server")
    assert json.loads(api(site, site.alice, "GET", f"sessions/{job.pk}/").text)["ended_why"]


def test_a_session_waiting_in_slurms_queue_shows_why_and_cancelled_there_costs_nothing_and_leaves_no_server_on_the_hub(
        sessions_site, live_server, live_worker):
    """Slurm accepts a walltime longer than its partition's limit (EnforcePartLimits=NO) and holds the job
    pending with reason PartitionTimeLimit: a session that waits for as long as the test needs, on the shared test
    cluster, without taking any node from anyone."""
    from portal.budgets import actions as budgets
    from portal.catalog.models import HardwareType
    from portal.jobs.models import Job, JobState

    site, hub = sessions_site, sessions_site.hub
    site.live_url = live_server.url
    HardwareType.objects.filter(slug="slurm-a100x1").update(max_walltime_hours=48)
    answer = api(site, site.alice, "POST", "sessions/", {
        "project": "vision", "hardware": "slurm-a100x1", "software": LAB, "walltime": "25h", "name": "waits"})
    assert answer.status_code == 202, answer.text
    job = wait_for(lambda: Job.objects.filter(kind=Job.Kind.SESSION, state=JobState.PENDING,
                                              state_reason__contains="PartitionTimeLimit").first(), timeout=120,
                   message="the session pending in Slurm's queue, with Slurm's reason")
    detail = api(site, site.alice, "GET", f"sessions/{job.pk}/").json()
    assert detail["state"] == "pending" and not detail["ready"] and detail["server_url"] is None
    assert "PartitionTimeLimit" in detail["state_reason"]
    assert (hub_server(hub, "alice", "waits") or {}).get("pending") == "spawn"  # the hub's spawn page waits
    assert budgets.summary(site.budget).reserved == Decimal("12.5000")  # 25 h × 0.5 points reserved meanwhile

    assert api(site, site.alice, "POST", f"sessions/{job.pk}/stop/").status_code == 200
    job = wait_for(lambda: Job.objects.filter(pk=job.pk, state=JobState.CANCELLED).first(), timeout=120,
                   message="the pending session cancelled")
    assert job.cost_amount == 0 and not job.events.filter(cause="session_ready").exists()
    assert budgets.summary(site.budget).reserved == 0
    # The spawner's start sees the end and gives up: the hub forgets the server.
    wait_for(lambda: hub_server(hub, "alice", "waits") is None, timeout=60, message="the hub dropped the spawn")
    # …and its named server is removed, not kept stopped: stopped ones count against the hub's limit per user.
    wait_for(lambda: hub_server(hub, "alice", "waits", stopped=True) is None, timeout=90,
             message="the hub removed the ended session's named server")


def test_a_strict_budget_running_out_stops_a_running_session_and_its_owner_is_told_it_was_a_session(
        sessions_site, live_server, live_worker):
    from portal.jobs.models import Job, JobState
    from portal.notifications.models import Notification
    from portal.usage.enforcement import enforce

    site = sessions_site
    site.live_url = live_server.url
    answer = api(site, site.alice, "POST", "sessions/", {
        "project": "vision", "hardware": "slurm-a100x1", "software": LAB, "walltime": "10m", "name": "spends"})
    assert answer.status_code == 202, answer.text
    session = ready_session("spends")
    # The running session's burn alone uses it up: the budget is set to what it has burnt once that shows at the
    # budget's 4 decimals (a second of the slice may not, on a quick machine), and burn only grows.
    from portal.usage.enforcement import burn

    burnt = wait_for(lambda: burn(site.budget.project).quantize(Decimal("0.0001")) or None, timeout=120,
                     message="the session's burn")
    site.budget.amount = burnt
    site.budget.save()
    report = enforce(site.budget)
    assert report.cancelled == [session.job_id]
    job = wait_for(lambda: Job.objects.filter(pk=session.job_id, state=JobState.CANCELLED).first(), timeout=120,
                   message="the session cancelled by the budget")
    assert job.events.filter(cause="cancelled_by_budget").exists()
    told = Notification.objects.get(user=site.alice, job=job)
    assert told.text.startswith("Session spends (vision) cancelled by your project's strict budget")
    refused = api(site, site.alice, "POST", "sessions/", {
        "project": "vision", "hardware": "slurm-a100x1", "software": LAB, "walltime": "10m", "name": "more"})
    assert refused.status_code == 402 and refused.json()["code"] == "budget_exceeded"
    assert refused.json()["detail"].startswith("This session needs an estimated")


def test_a_session_runs_on_tsubame_style_grid_engine_too(sessions_site, live_server, live_worker):
    """The same session on the TSUBAME-style Grid Engine (qsub -g, the s_gpu resource), its node's $JOB_ID."""
    from portal.jobs.models import JobState

    site, hub = sessions_site, sessions_site.hub
    site.live_url = live_server.url
    session = routed_session(site, "tsubame-s-gpu", "10m", "tsubame", timeout=120)
    assert session.job.cluster.slug == "sge-tsubame-test" and session.job.scheduler_id.isdigit()
    assert "#$ -l s_gpu=1" in session.job.rendered_script
    token = hub.token("alice")
    status = requests.get(f"{hub.url}/user/alice/tsubame/api/status", headers={"Authorization": f"token {token}"},
                          timeout=30)
    assert status.status_code == 200, status.text
    assert api(site, site.alice, "POST", f"sessions/{session.job_id}/stop/").status_code == 200
    job = wait_for(lambda: type(session.job).objects.filter(pk=session.job_id, state=JobState.CANCELLED,
                                                            cost_amount__isnull=False).first(),
                   timeout=120, message="the Grid Engine session ended in qacct and settled")
    assert job.exit_signal is not None or job.exit_code is not None


def test_a_session_left_unused_with_its_gpus_idle_is_warned_then_stopped_by_the_idle_rule_and_its_owner_told_it_was_a_session(
        sessions_site, live_server, live_worker, gpus, settings):  # noqa: F811
    """The project's rule in seconds (a window of 3 s, warnings at 3 and 5, the stop at 7). Its owner uses the Lab
    once (the hub is told, as jupyterhub-singleuser tells it), then leaves it; its GPU answers the test cluster's
    nvidia-smi stand-in (idle). The sample reader runs here as the beat runs it (the worker's own, every 30 s,
    judges by the same rule); the worker stops the job on Slurm."""
    from datetime import UTC, datetime

    from portal.jobs.causes import Cause
    from portal.jobs.models import Job, JobEvent, JobState
    from portal.notifications.models import Kind, Notification
    from portal.samples.fetch import watch_cluster
    from portal.samples.models import IdleRule, JobSamples

    site, hub = sessions_site, sessions_site.hub
    site.live_url = live_server.url
    settings.KAKEHASHI_IDLE_MIN_WINDOW_SECONDS = 1  # as the worker's (sessions_site)
    cluster = site.clusters["slurm-test"]
    cluster.options = {**cluster.options, "sample_seconds": 1, "nvidia_smi": str(gpus / "nvidia-smi")}
    cluster.save()
    say(gpus, "gpus.csv", "a100-8x-idle.csv")
    answer = api(site, site.alice, "POST", "sessions/", {
        "project": "vision", "hardware": "slurm-a100x1", "software": LAB, "walltime": "10m", "name": "unused"})
    assert answer.status_code == 202, answer.text
    session = ready_session("unused")
    job_id = session.job_id
    # Once the Lab is up (it has told the hub its own start), its owner uses it: the hub's activity API, as the
    # Lab's server reports a use. The clock of idleness starts there; until the rule exists, the site's applies.
    wait_for(lambda: (hub_server(hub, "alice", "unused") or {}).get("ready"), timeout=60, message="the hub's server")
    used = requests.post(f"{hub.api_url}/users/alice/activity", timeout=10,
                         headers={"Authorization": f"token {hub.token('alice')}"},
                         json={"servers": {"unused": {"last_activity": datetime.now(UTC).isoformat()}}})
    assert used.ok, used.text
    IdleRule.objects.create(project=site.project, threshold_percent=5, window_seconds=3, warn_at_seconds=[3, 5],
                            action="cancel", cancel_after_seconds=7, keep_max_hours=1)
    watch_cluster(cluster.pk)
    samples = JobSamples.objects.get(job_id=job_id)
    assert samples.state == "busy" and samples.state_why.startswith("used in JupyterLab within the window")

    def stop_asked():
        watch_cluster(cluster.pk)
        return Job.objects.filter(pk=job_id, cancel_requested_at__isnull=False).exists()

    try:
        wait_for(stop_asked, timeout=60, interval=0.5, message="the idle rule's stop")
    except AssertionError as exc:
        samples = JobSamples.objects.filter(job_id=job_id).first()
        raise AssertionError(f"{exc}; the rule said {samples and samples.state}: {samples and samples.state_why}") \
            from None
    warnings = list(JobEvent.objects.filter(job_id=job_id, cause=Cause.IDLE_WARNED).order_by("pk"))
    assert [w.data["warn_at_minutes"] for w in warnings] == [3 / 60, 5 / 60]
    for warning in warnings:  # the evidence: when the Lab was last used, and the GPU's samples
        assert warning.data["last_activity"].endswith(" UTC") and warning.data["samples"]
        assert all(utilisation < 5 for _, _, utilisation in warning.data["samples"])
        assert warning.reason.startswith("its owner was warned: no activity in JupyterLab and every GPU idle for ")
    asked = JobEvent.objects.get(job_id=job_id, cause=Cause.CANCEL_REQUESTED)
    assert asked.data["last_activity"] == warnings[0].data["last_activity"] and asked.data["samples"]

    job = wait_for(lambda: Job.objects.filter(pk=job_id, state=JobState.CANCELLED).first(), timeout=60,
                   message="the session's job cancelled on Slurm")
    assert job.cancel_cause == Cause.CANCELLED_IDLE and job.events.filter(cause=Cause.CANCELLED_IDLE).exists()
    told = list(Notification.objects.filter(user=site.alice, job_id=job_id, kind=Kind.IDLE).order_by("pk"))
    assert len(told) == 3 and all(n.text.startswith("Session unused (vision)") for n in told)
    assert told[0].text == "Session unused (vision): unused for 0 minutes"
    assert told[-1].text.startswith("Session unused (vision) stopped by the idle rule (project vision): no activity "
                                    "in JupyterLab and every GPU idle for ")
    ended_why = api(site, site.alice, "GET", f"sessions/{job_id}/").json()["ended_why"]
    assert ended_why.startswith("stopped by the idle rule (project vision)")
    gpu = api(site, site.alice, "GET", f"jobs/{job_id}/").json()["gpu"]
    assert gpu["rule"].startswith("project vision rule: a session is idle when nobody uses its JupyterLab and every GPU")


def test_a_session_at_the_end_of_its_walltime_warns_in_lab_then_ends_by_its_walltime_and_its_page_says_so(
        sessions_site, live_server, live_worker, client):
    """Slurm's shortest limit, a minute: both warnings (15 and 5 minutes before the end) are due from the start.
    The warning is asked where Lab's status bar asks it, the session server's /kakehashi/session through the hub's
    proxy (which asks the portal with the server's hub token); Slurm ends the job at its limit (its time-limit
    check runs every 30 s), and the tracker reads the walltime ending from Slurm."""
    from portal.jobs.causes import Cause
    from portal.jobs.models import Job, JobState
    from portal.notifications.models import Notification

    site, hub = sessions_site, sessions_site.hub
    site.live_url = live_server.url
    session = routed_session(site, "slurm-a100x1", "1m", "short")
    lab = requests.get(f"{hub.url}/user/alice/short/kakehashi/session", timeout=30,
                       headers={"Authorization": f"token {hub.token('alice')}"})
    assert lab.status_code == 200, lab.text
    shown = lab.json()
    assert shown["name"] == "short" and 0 <= shown["seconds_left"] <= 60
    assert shown["warning"] == "This session ends in 1 minute(s), at its walltime: save your work now."
    client.force_login(site.alice)
    assert "This session ends in 1 minute(s)" in client.get("/sessions/").content.decode()

    job = wait_for(lambda: Job.objects.filter(pk=session.job_id, state=JobState.TIMED_OUT).first(), timeout=150,
                   interval=1, message="the session's job ended by Slurm at its walltime")
    assert job.events.order_by("-pk").first().cause == Cause.WALLTIME
    detail = api(site, site.alice, "GET", f"sessions/{job.pk}/").json()
    assert detail["state"] == "timed_out" and detail["warning"] == ""
    assert detail["ended_why"].startswith("ran out of its walltime")
    page = client.get("/sessions/").content.decode()
    assert "ran out of its walltime" in page and "This session ends in" not in page
    told = Notification.objects.get(user=site.alice, job=job)
    assert told.text.startswith("Session short (vision) ran out of its walltime")
