"""Faults of the services the portal stands on, each test leaving them as it found them.

Already tested elsewhere (extended, not repeated, here): an unreachable login node keeps a job submitting and says
why, tracking an unreachable cluster changes no job, a worker killed after sbatch submits nothing twice, a queue
message lost in a Redis restart is sent again (tests/jobs/test_crash_recovery.py).
"""

from __future__ import annotations

import contextlib
import re
import socket
import subprocess
import sys
import threading
import time

import pytest
import requests

from tests.portal.test_hardening import HOST, ROOT, _free_port, _production_env

VIA_PROXY = {"Host": HOST, "X-Forwarded-Proto": "https"}


def _closed_port() -> int:
    """A port nothing listens on (bound, then released): a PostgreSQL that is down."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def portal_without_its_database(tmp_path_factory):
    """gunicorn in the production profile whose DATABASE_URL points at a closed port. The machine's shared
    PostgreSQL is never touched."""
    var_dir = tmp_path_factory.mktemp("no-db")
    env = _production_env(var_dir, DATABASE_URL=f"postgres://postgres@127.0.0.1:{_closed_port()}/kakehashi")
    subprocess.run([sys.executable, "manage.py", "collectstatic", "--noinput", "-v0"], cwd=ROOT, env=env, check=True)
    port = _free_port()
    log = open(var_dir / "gunicorn.log", "wb")  # noqa: SIM115 - a file, not a pipe: the logged errors must not fill it
    proc = subprocess.Popen([sys.executable, "-m", "gunicorn", "portal.wsgi:application", "--bind", f"127.0.0.1:{port}",
                             "--workers", "1"], cwd=ROOT, env=env, stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            requests.get(f"{url}/healthz", timeout=15)
            break
        except requests.ConnectionError:
            assert proc.poll() is None and time.monotonic() < deadline, (var_dir / "gunicorn.log").read_text()[-3000:]
            time.sleep(0.2)
    yield url
    proc.terminate()
    proc.wait(timeout=10)
    log.close()


def _unavailable(response, label: str) -> None:
    assert response.status_code == 503, f"{label}: {response.status_code} {response.text[:300]}"
    assert int(response.headers["Retry-After"]) > 0, label
    assert "cannot reach its database" in response.text, label
    assert "Traceback" not in response.text and "OperationalError" not in response.text, label


def test_with_the_database_unreachable_pages_answer_503_with_a_message_not_a_traceback(portal_without_its_database):
    url = portal_without_its_database
    signed_in = {**VIA_PROXY, "Cookie": "sessionid=" + "x" * 32}  # a session the portal must look up
    for path in ("/", "/jobs/", "/projects/vision/", "/jobs/1/", "/data/", "/settings/tokens/"):
        response = requests.get(url + path, headers=signed_in, allow_redirects=False, timeout=30)
        _unavailable(response, path)
        assert response.headers["Content-Type"].startswith("text/html")
    page = requests.get(f"{url}/accounts/login/", headers=VIA_PROXY, timeout=30)
    assert page.status_code in (200, 503), page.status_code
    if page.status_code == 200:  # the sign-in form needs no database; signing in does
        csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
        response = requests.post(f"{url}/accounts/login/", data={
            "csrfmiddlewaretoken": csrf, "login": "alice", "password": "pw-for-tests-123",
        }, headers={**VIA_PROXY, "Referer": f"https://{HOST}/accounts/login/",
                    "Cookie": f"csrftoken={page.cookies['csrftoken']}"}, allow_redirects=False, timeout=30)
        _unavailable(response, "sign in")
    # The load balancer's health check is told too (the request's middleware already needs the database).
    _unavailable(requests.get(f"{url}/healthz", headers={"Host": HOST}, timeout=30), "/healthz")


def test_with_the_database_unreachable_the_api_answers_503_json(portal_without_its_database):
    url = portal_without_its_database
    token = {**VIA_PROXY, "Authorization": "Bearer kh_" + "a" * 43}
    for method, path in (("GET", "/api/v1/jobs/"), ("POST", "/api/v1/jobs/"), ("GET", "/api/v1/me/"),
                         ("POST", "/api/v1/jobs/1/cancel/"), ("GET", "/api/v1/projects/vision/files/")):
        response = requests.request(method, url + path, headers=token, json={"project": "vision"}, timeout=30)
        _unavailable(response, f"{method} {path}")
        assert response.json()["code"] == "database_unavailable"


# ------------------------------------------------------------------------- a login node whose sshd stops


@pytest.fixture
def private_login_node(tmp_path, test_cluster):
    """A Slurm login node of its own: a second sshd (the harness's host key and users) on a free port, so this
    test can stop and start it without touching the login nodes other tests use. Its Slurm commands read their
    own copy of slurm.conf, so the controller can seem to stop for this login node only (controller(False)
    points them at a port where no slurmctld listens). Yields (port, stop, start, controller)."""
    import shutil
    import tempfile
    from pathlib import Path

    # Outside pytest's own temporary directories, which only root may enter: alice's commands read this.
    conf_dir = Path(tempfile.mkdtemp(prefix="kakehashi-slurm-conf-")) / "slurm"
    conf_dir.parent.chmod(0o755)
    shutil.copytree("/etc/slurm", conf_dir, ignore=shutil.ignore_patterns("slurmdbd.conf"))
    conf_dir.chmod(0o755)
    real_conf = (conf_dir / "slurm.conf").read_text()

    def controller(up: bool) -> None:
        text = real_conf if up else re.sub(r"(?m)^SlurmctldPort=.*$", f"SlurmctldPort={_closed_port()}",
                                           re.sub(r"(?m)^MessageTimeout=.*\n", "", real_conf)) + "MessageTimeout=2\n"
        (conf_dir / "slurm.conf").write_text(text)
        (conf_dir / "slurm.conf").chmod(0o644)

    config = (test_cluster / "etc" / "sshd_config").read_text()
    port = _free_port()
    config = re.sub(r"(?m)^Port \d+\n", "", config.split("\nMatch ")[0])
    config = config.replace(str(test_cluster / "run" / "sshd.pid"), str(tmp_path / "sshd.pid"))
    qmaster_port = [""]

    def write_config() -> None:
        # SGE_QMASTER_PORT: where Grid Engine's commands look for sge_qmaster; a closed port = a stopped qmaster.
        extra = f" SGE_QMASTER_PORT={qmaster_port[0]}" if qmaster_port[0] else ""
        (tmp_path / "sshd_config").write_text(f"Port {port}\n{config}\nSetEnv KAKEHASHI_LOGIN_NODE=private "
                                              f"SLURM_CONF={conf_dir / 'slurm.conf'}{extra}\n")

    write_config()

    def start() -> None:
        subprocess.run(["/usr/sbin/sshd", "-f", str(tmp_path / "sshd_config"), "-E", str(tmp_path / "sshd.log")],
                       check=True)
        deadline = time.monotonic() + 10
        while socket.socket().connect_ex(("127.0.0.1", port)) != 0:
            assert time.monotonic() < deadline, (tmp_path / "sshd.log").read_text()
            time.sleep(0.1)

    def stop() -> None:
        """The whole daemon down: the listener and the sessions it serves (the portal keeps connections open)."""
        pid = int((tmp_path / "sshd.pid").read_text())
        sessions = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout.split()
        for victim in [pid, *map(int, sessions)]:
            subprocess.run(["kill", str(victim)], check=False)
        deadline = time.monotonic() + 10
        while socket.socket().connect_ex(("127.0.0.1", port)) == 0:
            assert time.monotonic() < deadline
            time.sleep(0.1)

    def qmaster(up: bool) -> None:
        """Grid Engine's qmaster stops answering this login node (its sshd restarts with the new setting)."""
        from backends.transport import SSHTransport

        qmaster_port[0] = "" if up else str(_closed_port())
        stop()
        write_config()
        start()
        SSHTransport.close_all()

    start()
    yield port, stop, start, controller, qmaster
    if (tmp_path / "sshd.pid").exists() and socket.socket().connect_ex(("127.0.0.1", port)) == 0:
        stop()
    shutil.rmtree(conf_dir.parent)


def _private_cluster(hpc_site, cluster_keys, test_cluster, port: int, kind: str = "slurm"):
    """The private login node registered as a Slurm (or plain Grid Engine) cluster of project vision, alice's
    account linked. Returns (cluster, submit(name, script) -> Job, on_scheduler(job) -> the scheduler's ids of the
    jobs it holds under the job's name)."""
    from decimal import Decimal

    from portal.catalog.models import HardwareType
    from portal.clusters.connect import account_for, backend_for
    from portal.clusters.models import Allocation, Cluster, ClusterAccount, Kind
    from portal.jobs.actions.submit import submit_job
    from portal.jobs.actions.validation import JobRequest

    host_key = (test_cluster / "etc" / "ssh_host_ed25519_key.pub").read_text().split()[:2]
    # The test cluster's Grid Engine writes accounting out every second (portal/dev/loopback.py says the same).
    cluster = Cluster.objects.create(slug=f"{kind}-private", name=f"{kind} (private login node)", kind=kind,
                                     login_host="127.0.0.1", login_port=port,
                                     host_keys=f"[127.0.0.1]:{port} {' '.join(host_key)}\n", work_root="kakehashi-jobs",
                                     options={"accounting_flush_seconds": 2} if kind == Kind.SGE else {})
    hardware = HardwareType.objects.create(cluster=cluster, slug="private-a100x1", name="A100 slice", gpu_model="a100",
                                           gpus_per_node=1, cpus_per_node=1, rate=Decimal("1"),
                                           scheduler_mapping={"partition": "gpu", "gres": "gpu:a100:1"} if kind == Kind.SLURM
                                           else {"pe": "smp", "gpu_resource": "gpu"})
    Allocation.objects.create(project=hpc_site.project, cluster=cluster, group="kkdemo")
    private, public = cluster_keys["alice"]
    account = ClusterAccount(cluster=cluster, user=hpc_site.alice, username="alice", public_key=public)
    account.set_private_key(private)
    account.save()

    def submit(name: str, script: str):
        return submit_job(hpc_site.alice, JobRequest(
            project=hpc_site.project, name=name, script=script, hardware=hardware, walltime="00:05:00")).job

    def on_scheduler(job) -> list[str]:
        backend = backend_for(job.cluster, account_for(job.cluster, job.user, job.project))
        if kind == Kind.SLURM:
            command = ["squeue", "-h", "-t", "all", "-n", job.scheduler_name, "-o", "%i"]
            return backend.transport.run(command).stdout.split()
        listing = backend.transport.run(["qstat", "-xml", "-u", "alice"]).stdout
        return re.findall(rf"<JB_job_number>(\d+)</JB_job_number>\s*<JAT_prio>[^<]*</JAT_prio>\s*"
                          rf"<JB_name>{re.escape(job.scheduler_name)}</JB_name>", listing)

    return cluster, submit, on_scheduler


def _cancel(cluster, site, *jobs) -> None:
    from portal.clusters.connect import account_for, backend_for

    backend = backend_for(cluster, account_for(cluster, site.alice, site.project))
    for job in jobs:
        job.refresh_from_db()
        if job.scheduler_id:
            backend.cancel(job.scheduler_id)


def _answered(cluster) -> str:
    """As the tracker and the health beat would before the outage: the cluster answers both, and the pages will
    say it has been unreachable since then. Returns that time as the pages write it."""
    from django.template.defaultfilters import date

    from portal.clusters import health
    from portal.clusters.models import Cluster
    from portal.jobs import tracking

    assert tracking.track_cluster(cluster.pk).error == ""
    assert health.collect(cluster).reachable
    return date(Cluster.objects.get(pk=cluster.pk).last_answered_at, "Y-m-d H:i T")


def _text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", html))


def _pages(client, site, cluster, jobs) -> tuple[str, str, list[str]]:
    """What the researcher's cluster page (/clusters/, her row of the cluster), the site admin's page (/site/, the
    cluster's last-contact cell) and the pages of `jobs` say, as text."""
    from django.contrib.auth import get_user_model

    client.force_login(site.alice)
    row = client.get("/clusters/").content.decode().split(f'data-cluster="{cluster.slug}"')[1].split("</tr>")[0]
    job_pages = [_text(client.get(f"/jobs/{job.pk}/").content.decode()) for job in jobs]
    admin, _ = get_user_model().objects.get_or_create(username="site-admin", defaults={"is_staff": True})
    client.force_login(admin)
    cell = client.get("/site/").content.decode().split(f'data-cluster-contact="{cluster.slug}"')[1].split("</td>")[0]
    return row, cell, job_pages


def _shown_degraded(client, site, cluster, jobs, since: str, reason: str) -> None:
    """The cluster page, the site page and each job's page say it is unreachable, since when and why."""
    import html

    row, cell, job_pages = _pages(client, site, cluster, jobs)
    assert 'data-answering="no"' in row and "text-bg-danger" in row, row
    assert f"unreachable since {since}, when it last answered" in _text(row), _text(row)
    assert html.escape(reason)[:40] in row, (reason, row)
    assert f"unreachable since {since}, when it last answered" in _text(cell), _text(cell)
    assert html.escape(reason)[:40] in cell, (reason, cell)
    for page in job_pages:
        assert f"{cluster.name} is not answering: unreachable since {since}, when it last answered" in page, page
        assert "The state shown is the last one known" in page


def _shown_healthy(client, site, cluster, jobs) -> None:
    row, cell, job_pages = _pages(client, site, cluster, jobs)
    assert 'data-answering="yes"' in row and "unreachable" not in row, row
    assert "unreachable" not in cell and "ago" in cell, cell
    for page in job_pages:
        assert "unreachable" not in page and "is not answering" not in page


@pytest.mark.cluster
@pytest.mark.django_db  # not transactional: the session's live worker must not see (and dispatch) these jobs
def _ends_unseen(client, site, cluster, ending, since: str, ended_on_scheduler) -> None:
    """While the portal cannot reach the controller, `ending` ends on it (`ended_on_scheduler(backend)` says so, as
    the shared controller's accounting answers): the portal concludes nothing, the job keeps its last known state."""
    from portal.clusters.connect import account_for, backend_for
    from portal.clusters.models import Cluster
    from portal.jobs import tracking
    from portal.jobs.models import JobState
    from tests.conftest import wait_for

    backend = backend_for(cluster, account_for(cluster, site.alice, site.project))
    wait_for(lambda: ended_on_scheduler(backend), timeout=90, interval=1, message="the short job to end on the scheduler")
    assert tracking.track_cluster(cluster.pk).error
    ending.refresh_from_db()
    assert ending.state == JobState.RUNNING and ending.exit_code is None and ending.ended_at is None
    assert not ending.events.exclude(to_state__in=[JobState.QUEUED, JobState.SUBMITTING, JobState.PENDING,
                                                   JobState.RUNNING]).exists()
    _shown_degraded(client, site, cluster, [ending], since, Cluster.objects.get(pk=cluster.pk).last_error)


def _recorded_once(cluster, ending) -> None:
    """The controller back: tracking records the real end, from accounting, exactly once (a Grid Engine job that ran
    in a parallel environment once the cluster's accounting_flush_seconds have passed: SoGE's qacct may not hold
    the job's own record yet, only its tasks')."""
    from portal.jobs import tracking
    from portal.jobs.models import FINAL_STATES, Job, JobState
    from tests.conftest import wait_for

    wait_for(lambda: tracking.track_cluster(cluster.pk).error == "" and Job.objects.get(pk=ending.pk).state
             in FINAL_STATES, timeout=20, interval=0.5, message="the job's end to be recorded")
    ending.refresh_from_db()
    assert ending.state == JobState.COMPLETED and ending.exit_code == 0, (ending.state, ending.state_reason)
    assert tracking.track_cluster(cluster.pk).error == ""
    assert ending.events.filter(to_state=JobState.COMPLETED).count() == 1
    assert not ending.events.filter(to_state__in=[JobState.FAILED, JobState.LOST]).exists()


def test_a_login_node_whose_sshd_stops_leaves_every_job_truthful_and_recovers_without_a_duplicate(
        client, hpc_site, cluster_keys, test_cluster, private_login_node):
    from backends.transport import SSHTransport
    from portal.clusters import health
    from portal.jobs import tracking
    from portal.jobs.actions.dispatch import dispatch_job
    from portal.jobs.models import JobState

    port, stop, start, _, _ = private_login_node
    cluster, submit, on_scheduler = _private_cluster(hpc_site, cluster_keys, test_cluster, port)

    running = submit("running-through", "sleep 25")
    assert dispatch_job(running.pk).status == "submitted"
    waiting = submit("waiting-out", "echo after the outage")
    since = _answered(cluster)
    try:
        stop()
        # Being submitted while the login node is down: it keeps waiting, says why, and is never failed.
        outcome = dispatch_job(waiting.pk)
        waiting.refresh_from_db()
        assert outcome.status == "retry"
        assert waiting.state == JobState.SUBMITTING and waiting.scheduler_id == ""
        assert "could not reach the scheduler yet" in waiting.state_reason
        # Tracking while it is down changes no job and marks the cluster as not answering.
        report = tracking.track_cluster(cluster.pk)
        running.refresh_from_db()
        assert report.error and running.state in (JobState.PENDING, JobState.RUNNING)
        cluster.refresh_from_db()
        assert cluster.last_error
        _shown_degraded(client, hpc_site, cluster, [running], since, cluster.last_error)
        # The health beat finds it silent too; the pages say the same.
        assert health.collect(cluster).reachable is False
        _shown_degraded(client, hpc_site, cluster, [running], since, cluster.last_error)
    finally:
        start()
    SSHTransport.close_all()  # connections the portal held died with the daemon
    outcome = dispatch_job(waiting.pk)
    waiting.refresh_from_db()
    assert outcome.status in ("submitted", "found") and waiting.state == JobState.PENDING
    assert len(on_scheduler(waiting)) == 1  # one submission, however many tries
    assert tracking.track_cluster(cluster.pk).error == ""
    cluster.refresh_from_db()
    assert cluster.last_error == ""
    assert health.collect(cluster).reachable
    _shown_healthy(client, hpc_site, cluster, [running, waiting])
    assert on_scheduler(running) == [running.scheduler_id]
    _cancel(cluster, hpc_site, running, waiting)


@pytest.mark.long
@pytest.mark.cluster
@pytest.mark.django_db  # not transactional, as above
def test_a_slurm_controller_that_stops_answering_fails_no_job_and_records_the_one_that_ended_meanwhile_once_it_is_back(
        client, hpc_site, cluster_keys, test_cluster, private_login_node):
    """sbatch reports an unreachable slurmctld as "Batch job submission failed": the job used to be marked failed
    on that guess. The controller stops for this login node only (its own slurm.conf points elsewhere), so the
    shared controller keeps running the jobs: one of them ends while the portal cannot ask about it."""
    from portal.clusters import health
    from portal.jobs import tracking
    from portal.jobs.actions.dispatch import dispatch_job
    from portal.jobs.models import Job, JobState
    from tests.conftest import wait_for

    port, _, _, controller, _ = private_login_node
    cluster, submit, on_scheduler = _private_cluster(hpc_site, cluster_keys, test_cluster, port)
    running = submit("queued-through", "sleep 300")  # cancelled at the end
    assert dispatch_job(running.pk).status == "submitted"
    # Long enough to be seen running by a tracking cycle on a loaded machine (it ran 12 s, and was once seen only
    # pending, then ended), short enough to end within the outage's wait below.
    ending = submit("ends-in-the-outage", "sleep 30")
    assert dispatch_job(ending.pk).status == "submitted"
    waiting = submit("submitted-after", "echo after the outage")
    wait_for(lambda: tracking.track_cluster(cluster.pk).error == "" and Job.objects.get(pk=ending.pk).state
             == JobState.RUNNING, timeout=180, interval=1, message="the short job to be seen running")
    since = _answered(cluster)
    ending.refresh_from_db()
    try:
        controller(up=False)
        outcome = dispatch_job(waiting.pk)
        waiting.refresh_from_db()
        assert outcome.status == "retry", outcome
        assert waiting.state == JobState.SUBMITTING and "controller is not answering" in waiting.state_reason
        report = tracking.track_cluster(cluster.pk)
        running.refresh_from_db()
        assert report.error and running.state in (JobState.PENDING, JobState.RUNNING)
        cluster.refresh_from_db()
        assert "Unable to contact slurm controller" in cluster.last_error
        assert health.collect(cluster).reachable is False
        _shown_degraded(client, hpc_site, cluster, [running, ending], since, cluster.last_error)
        # The short job ends meanwhile: the shared controller (asked with the real slurm.conf) says so...
        _ends_unseen(client, hpc_site, cluster, ending, since, lambda backend: backend.transport.run(
            ["env", "SLURM_CONF=/etc/slurm/slurm.conf", "sacct", "-n", "-X", "-P", "-o", "State", "-j",
             ending.scheduler_id]).stdout.strip() == "COMPLETED")
    finally:
        controller(up=True)
    _recorded_once(cluster, ending)
    outcome = dispatch_job(waiting.pk)
    waiting.refresh_from_db()
    assert outcome.status in ("submitted", "found") and waiting.state == JobState.PENDING
    assert len(on_scheduler(waiting)) == 1
    assert tracking.track_cluster(cluster.pk).error == ""
    assert health.collect(cluster).reachable
    running.refresh_from_db()
    assert running.state in (JobState.PENDING, JobState.RUNNING)
    _shown_healthy(client, hpc_site, cluster, [running, waiting])
    _cancel(cluster, hpc_site, running, waiting)


# ------------------------------------------------------------------------------------- Redis restarted


@pytest.fixture
def private_redis(tmp_path):
    """A Redis of this test's own (no persistence, as the suite's), so it can be killed and restarted without
    touching the machine's shared Redis. Yields (url, restart)."""
    port = _free_port()
    state = {}

    def start() -> None:
        state["proc"] = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                          "--appendonly", "no", "--dir", str(tmp_path)], stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while socket.socket().connect_ex(("127.0.0.1", port)) != 0:
            assert time.monotonic() < deadline
            time.sleep(0.05)

    def restart() -> None:
        state["proc"].kill()  # as a crash: nothing written anywhere, every queued message gone
        state["proc"].wait(timeout=10)
        start()

    start()
    yield f"redis://127.0.0.1:{port}/0", restart
    state["proc"].kill()
    state["proc"].wait(timeout=10)


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_a_redis_restart_with_dispatches_queued_loses_no_job_and_the_worker_carries_on(local_site, private_redis,
                                                                                      monkeypatch):
    import uuid
    from pathlib import Path

    from django.conf import settings

    from portal.jobs.actions import submit as submit_actions
    from portal.jobs.actions.submit import submit_job
    from portal.jobs.actions.validation import JobRequest
    from portal.jobs.models import Job, JobState
    from portal.jobs.tasks import dispatch_job_task
    from tests.conftest import start_worker, stop_worker, wait_for
    from workers.celery import app

    url, restart = private_redis
    queue = f"redis-restart-{uuid.uuid4().hex[:6]}"
    # Jobs are recorded here and their dispatch messages sent to the private Redis by hand (the test process's
    # own broker is the shared one).
    monkeypatch.setattr(submit_actions, "enqueue_on_commit", lambda *task: None)

    def submit(name: str) -> Job:
        job = submit_job(local_site.alice, JobRequest(
            project=local_site.project, name=name, script=f"echo {name}", hardware=local_site.hardware,
            walltime="00:05:00")).job
        with app.connection_for_write(url) as connection:
            dispatch_job_task.apply_async(args=[job.pk], queue=queue, connection=connection)
        return job

    queued = [submit("before-the-crash-1"), submit("before-the-crash-2")]
    restart()  # with their messages still waiting in Redis, and no worker yet
    worker = start_worker("redis-crash", queue, Path(settings.VAR_DIR) / f"{queue}.log", CELERY_BROKER_URL=url,
                          REDIS_URL=url, KAKEHASHI_STALE_DISPATCH_SECONDS="2", KAKEHASHI_RECOVER_INTERVAL="1")
    try:
        for job in queued:
            done = wait_for(lambda job=job: Job.objects.filter(pk=job.pk, state=JobState.COMPLETED).first(),
                            timeout=90, message=f"{job.name} to run after the restart")
            assert done.exit_code == 0
            assert done.events.filter(to_state=JobState.PENDING).count() == 1  # handed over once
        restart()  # now under a running worker, which must reconnect on its own
        after = submit("after-the-crash")
        done = wait_for(lambda: Job.objects.filter(pk=after.pk, state=JobState.COMPLETED).first(), timeout=90,
                        message="a job sent after the second restart")
        assert done.exit_code == 0
        assert not Job.objects.exclude(state=JobState.COMPLETED).exists()  # nothing lost, nothing stuck
    finally:
        stop_worker(worker)


@pytest.mark.long
@pytest.mark.cluster
@pytest.mark.django_db  # not transactional, as above
def test_a_grid_engine_qmaster_that_stops_answering_fails_no_job_and_records_the_one_that_ended_meanwhile_once_it_is_back(
        client, hpc_site, cluster_keys, test_cluster, private_login_node):
    """The qmaster stops answering this login node only (its commands look for it on a closed port), so the shared
    qmaster keeps running the jobs: one of them ends while the portal cannot ask about it."""
    from portal.clusters import health
    from portal.jobs import tracking
    from portal.jobs.actions.dispatch import dispatch_job
    from portal.jobs.models import Job, JobState
    from tests.conftest import wait_for

    port, _, _, _, qmaster = private_login_node
    cluster, submit, on_scheduler = _private_cluster(hpc_site, cluster_keys, test_cluster, port, kind="sge")
    running = submit("queued-through", "sleep 300")  # cancelled at the end, as `waiting` is
    assert dispatch_job(running.pk).status == "submitted"
    ending = submit("ends-in-the-outage", "sleep 30")  # seen running on a loaded machine, ended within the outage
    assert dispatch_job(ending.pk).status == "submitted"
    waiting = submit("submitted-after", "sleep 300")
    wait_for(lambda: tracking.track_cluster(cluster.pk).error == "" and Job.objects.get(pk=ending.pk).state
             == JobState.RUNNING, timeout=180, interval=1, message="the short job to be seen running")
    since = _answered(cluster)
    ending.refresh_from_db()
    try:
        qmaster(up=False)
        outcome = dispatch_job(waiting.pk)
        waiting.refresh_from_db()
        assert outcome.status == "retry", outcome
        assert waiting.state == JobState.SUBMITTING and waiting.scheduler_id == ""
        report = tracking.track_cluster(cluster.pk)
        running.refresh_from_db()
        assert report.error and running.state in (JobState.PENDING, JobState.RUNNING)
        cluster.refresh_from_db()
        assert "qmaster" in cluster.last_error
        assert health.collect(cluster).reachable is False
        _shown_degraded(client, hpc_site, cluster, [running, ending], since, cluster.last_error)
        # The short job ends meanwhile: Grid Engine's accounting file (read by qacct, no qmaster needed) says so...
        _ends_unseen(client, hpc_site, cluster, ending, since, lambda backend: re.search(
            r"(?m)^exit_status\s+0\b", backend.transport.run(["qacct", "-j", ending.scheduler_id]).stdout) is not None)
    finally:
        qmaster(up=True)
    _recorded_once(cluster, ending)
    outcome = dispatch_job(waiting.pk)
    waiting.refresh_from_db()
    assert outcome.status in ("submitted", "found") and waiting.state == JobState.PENDING
    assert on_scheduler(waiting) == [waiting.scheduler_id]  # one submission, however many tries
    assert tracking.track_cluster(cluster.pk).error == ""
    assert health.collect(cluster).reachable
    running.refresh_from_db()
    assert running.state in (JobState.PENDING, JobState.RUNNING)
    _shown_healthy(client, hpc_site, cluster, [running, waiting])
    _cancel(cluster, hpc_site, running, waiting)


@pytest.mark.cluster
@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_a_worker_backs_off_while_the_login_node_is_down_and_submits_once_when_it_is_back(
        hpc_site, cluster_keys, test_cluster, private_login_node, monkeypatch):
    import uuid
    from pathlib import Path

    from django.conf import settings

    from portal.jobs.actions import submit as submit_actions
    from portal.jobs.models import Job, JobState
    from portal.jobs.tasks import dispatch_job_task
    from tests.conftest import start_worker, stop_worker, wait_for

    port, stop, start, _, _ = private_login_node
    cluster, submit, on_scheduler = _private_cluster(hpc_site, cluster_keys, test_cluster, port)
    monkeypatch.setattr(submit_actions, "enqueue_on_commit", lambda *task: None)  # sent to this test's queue below
    job = submit("patient", "sleep 20")
    queue = f"backoff-{uuid.uuid4().hex[:6]}"
    log = Path(settings.VAR_DIR) / f"{queue}.log"
    stop()
    worker = start_worker("backoff", queue, log, KAKEHASHI_SSH_TIMEOUT="5")
    try:
        dispatch_job_task.apply_async(args=[job.pk], queue=queue)
        retries = wait_for(lambda: re.findall(rf"job {job.pk}: dispatch will retry in (\d+) s", log.read_text()),
                           timeout=60, message="the first retry")
        retries = wait_for(lambda: (found := re.findall(rf"job {job.pk}: dispatch will retry in (\d+) s",
                                                        log.read_text()))[1:] and found, timeout=60,
                           message="the second retry")
        assert [int(r) for r in retries[:2]] == [5, 10]  # backing off, not hammering the login node
        current = Job.objects.get(pk=job.pk)
        assert current.state == JobState.SUBMITTING and "could not reach the scheduler yet" in current.state_reason
        start()
        done = wait_for(lambda: Job.objects.filter(pk=job.pk, state__in=[JobState.PENDING, JobState.RUNNING]).first(),
                        timeout=90, message="the job to be submitted once the login node is back")
        assert on_scheduler(done) == [done.scheduler_id]
    finally:
        stop_worker(worker)
        _cancel(cluster, hpc_site, job)


# ------------------------------------------------------------------------- PostgreSQL away for a while


class _DatabaseLink:
    """A TCP link to the machine's PostgreSQL that a test can cut and restore: to whoever connects through it (a
    worker, a web server), the database is away while it is cut: new connections are refused, open ones reset.
    The shared PostgreSQL itself is never stopped (other tests use it)."""

    def __init__(self, target: tuple[str, int] = ("127.0.0.1", 5432)) -> None:
        self.target = target
        self.port = _closed_port()
        self._lock = threading.Lock()
        self._open: list[socket.socket] = []
        self._listener: socket.socket | None = None
        self.ports: list[int] = []  # the link's own ends towards PostgreSQL: its sessions, in pg_stat_activity
        self.restore()

    def restore(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def cut(self) -> None:
        listener, self._listener = self._listener, None
        with contextlib.suppress(OSError):
            listener.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread: a close alone lets one more in
        with contextlib.suppress(OSError):
            listener.close()
        with self._lock:
            for sock in self._open:
                with contextlib.suppress(OSError):
                    # Shut down before closing: a close alone leaves the socket open under the thread blocked in
                    # recv() on it. Both ends see the connection end, as when a server goes away.
                    sock.shutdown(socket.SHUT_RDWR)
                with contextlib.suppress(OSError):
                    sock.close()
            self._open.clear()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # cut
            try:
                server = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._open += [client, server]
                self.ports.append(server.getsockname()[1])
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)


@pytest.fixture
def database_link():
    from django.db import connection

    from tests.conftest import wait_for

    link = _DatabaseLink()
    yield link
    link.cut()

    def sessions_left() -> int:
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE client_port = ANY(%s)", [link.ports])
            return cursor.fetchone()[0]

    # PostgreSQL ends a reset session a moment later: leave none behind on the test database.
    wait_for(lambda: sessions_left() == 0, timeout=30, message="the link's sessions to end")


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_a_worker_that_loses_its_database_waits_and_submits_the_job_once_when_it_is_back(local_site, database_link,
                                                                                       monkeypatch):
    import uuid
    from pathlib import Path

    from django.conf import settings
    from django.db import connection

    from portal.jobs.actions import submit as submit_actions
    from portal.jobs.actions.submit import submit_job
    from portal.jobs.actions.validation import JobRequest
    from portal.jobs.models import Job, JobState
    from portal.jobs.tasks import dispatch_job_task
    from tests.conftest import start_worker, stop_worker, wait_for

    db = connection.settings_dict
    queue = f"database-away-{uuid.uuid4().hex[:6]}"
    monkeypatch.setattr(submit_actions, "enqueue_on_commit", lambda *task: None)  # sent by hand, below
    job = submit_job(local_site.alice, JobRequest(
        project=local_site.project, name="through-the-outage", script="echo survived", hardware=local_site.hardware,
        walltime="00:05:00")).job
    log_path = Path(settings.VAR_DIR) / f"{queue}.log"
    # The worker reaches PostgreSQL only through the link; its stale-job sweep is off (an hour), so what brings
    # the job through is the task's own retry, not the sweep.
    worker = start_worker("database-away", queue, log_path,
                          DATABASE_URL=f"postgres://{db['USER'] or 'postgres'}@127.0.0.1:{database_link.port}/{db['NAME']}",
                          KAKEHASHI_STALE_DISPATCH_SECONDS="3600", KAKEHASHI_RECOVER_INTERVAL="3600",
                          KAKEHASHI_DATABASE_RETRY_MAX_SECONDS="2")
    try:
        database_link.cut()
        dispatch_job_task.apply_async(args=[job.pk], queue=queue)
        retried = f"dispatch_job_task[{job.pk}]: the database is unreachable"
        wait_for(lambda: log_path.read_text().count(retried) >= 2, timeout=60,
                 message="the worker to try the dispatch again while the database is away")
        job.refresh_from_db()
        assert job.state == JobState.QUEUED and job.scheduler_id == ""  # nothing recorded on a guess
        assert worker.poll() is None
        database_link.restore()
        done = wait_for(lambda: Job.objects.filter(pk=job.pk, state=JobState.COMPLETED).first(), timeout=90,
                        message="the job to run once the database is back")
        assert done.exit_code == 0
        assert done.events.filter(to_state=JobState.PENDING).count() == 1  # handed over once
    finally:
        stop_worker(worker)


@pytest.mark.django_db(transaction=True)
def test_the_web_server_answers_503_while_its_database_is_away_and_serves_again_when_it_is_back(database_link,
                                                                                                tmp_path):
    from django.db import connection

    db = connection.settings_dict
    env = _production_env(tmp_path, DATABASE_URL=(
        f"postgres://{db['USER'] or 'postgres'}@127.0.0.1:{database_link.port}/{db['NAME']}"))
    subprocess.run([sys.executable, "manage.py", "collectstatic", "--noinput", "-v0"], cwd=ROOT, env=env, check=True)
    port = _free_port()
    with open(tmp_path / "gunicorn.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "gunicorn", "portal.wsgi:application", "--bind",
                                 f"127.0.0.1:{port}", "--workers", "1"], cwd=ROOT, env=env, stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        def health() -> int | None:
            try:
                return requests.get(f"{url}/healthz", headers={"Host": HOST}, timeout=15).status_code
            except requests.ConnectionError:
                assert proc.poll() is None, (tmp_path / "gunicorn.log").read_text()[-3000:]
                return None

        from tests.conftest import wait_for

        wait_for(lambda: health() == 200, timeout=60, message="the portal to serve")  # a kept connection now
        database_link.cut()
        _unavailable(requests.get(f"{url}/healthz", headers={"Host": HOST}, timeout=30), "/healthz while away")
        _unavailable(requests.get(f"{url}/api/v1/me/", headers={**VIA_PROXY, "Authorization": "Bearer kh_" + "a" * 43},
                                  timeout=30), "the API while away")
        database_link.restore()
        # The broken connection is dropped and a new one made: no restart of the web server needed.
        assert health() == 200
        assert requests.get(f"{url}/api/v1/me/", headers={**VIA_PROXY, "Authorization": "Bearer kh_" + "a" * 43},
                            timeout=30).status_code == 401  # an unknown token: the database answered
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_closing_a_broker_connection_already_collected_with_a_message_unacknowledged_is_a_connection_error(
        private_redis):
    """What a Redis restart does to a worker, step by step (workers/broker_restart.py): the consumer collects the
    lost connection while its channel still holds a delivered message, then closes it. That close must end in an
    error the consumer's cleanup ignores, never in one that ends the worker."""
    from kombu import Connection, Exchange, Queue
    from redis.exceptions import ConnectionError as RedisConnectionError

    import workers.celery  # noqa: F401 - the worker's app installs the fix, as a worker's start does

    url, _ = private_redis
    queue = Queue("collected", Exchange("collected"), "collected")
    connection = Connection(url)
    channel = connection.default_channel
    connection.Producer().publish({"job": 1}, exchange=queue.exchange, routing_key="collected", declare=[queue])
    message = channel.basic_get("collected", no_ack=False)
    assert message is not None  # delivered, not acknowledged: a close must try to restore it
    connection._do_close_transport()  # what collect() leaves when the first close of the channel did not finish
    with pytest.raises(RedisConnectionError):
        channel.close()
    assert channel.closed
    connection.close()  # and the consumer's own cleanup, which ignores connection errors, passes
