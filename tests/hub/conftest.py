"""A real JupyterHub for the portal: configurable-http-proxy from npm, JupyterLab servers with the kakehashi-lab
extension, and the portal (live_server, a real WSGI server) as the hub's service.

The hub is started once per run, after the portal (the hub waits for its services), with jupyterhub/jupyterhub_config.py
itself: SharedPasswordAuthenticator for alice, bob and carol, the simple spawner (every server runs as this
process's user, with --allow-root as root), state and homes in a temporary directory. Each test points the portal's
settings at it (hub_portal) and builds its own portal accounts: carol has none.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import requests

from tests.browser.conftest import new_page, page, shots  # noqa: F401 - the browser tests' fixtures, here too
from tests.conftest import ROOT, TunnelProcess, live_worker_knows, wait_for
from tests.seaweedfs import free_port

HUB_DIR = ROOT / "jupyterhub"
PROXY = HUB_DIR / "node_modules" / ".bin" / "configurable-http-proxy"
HUB_PASSWORD = "hub-password-for-tests"
HUB_USERS = ("alice", "bob", "carol")
SERVICE = "kakehashi"
ARTIFACTS = ROOT / "test-artifacts"


def _free_port() -> int:
    return free_port()  # below the ephemeral range: no outgoing connection takes it before the server binds it


def install_proxy() -> Path:
    """configurable-http-proxy as pinned by jupyterhub/package-lock.json (`make hub-deps` does the same)."""
    if not PROXY.exists():
        if shutil.which("npm") is None:
            raise RuntimeError("npm is missing: run `make hub-deps` (it installs node and the proxy)")
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=HUB_DIR, check=True, capture_output=True)
    return PROXY


@dataclass
class Hub:
    url: str  # the proxy: what browsers and Lab use
    api_url: str  # the hub's own API, as the portal reaches it
    service_token: str
    state: Path
    log: Path
    sessions: dict[str, requests.Session] = field(default_factory=dict)

    def home(self, user: str) -> Path:
        path = self.state / "home" / user
        path.mkdir(parents=True, exist_ok=True)
        return path

    def session(self, user: str) -> requests.Session:
        """A requests session logged in to the hub as `user` (through its login form, with its XSRF cookie)."""
        if user not in self.sessions:
            session = requests.Session()
            session.get(f"{self.url}/hub/login", timeout=10)
            answer = session.post(f"{self.url}/hub/login", timeout=30, data={
                "username": user, "password": HUB_PASSWORD, "_xsrf": session.cookies.get("_xsrf")})
            assert answer.status_code == 200 and "/hub/login" not in answer.url, f"hub login failed for {user}"
            self.sessions[user] = session
        return self.sessions[user]

    def _xsrf(self, user: str) -> str:
        # The hub's own XSRF cookie (each Lab server sets another one under /user/<name>/).
        return next(c.value for c in self.session(user).cookies if c.name == "_xsrf" and c.path.startswith("/hub"))

    def token(self, user: str, scopes: list[str] | None = None, note: str = "tests") -> str:
        """A new hub API token of `user`, made by the user on the hub (their own scopes unless narrowed)."""
        session = self.session(user)
        body = {"note": note, **({"scopes": scopes} if scopes is not None else {})}
        answer = session.post(f"{self.url}/hub/api/users/{user}/tokens", json=body, timeout=10,
                              headers={"X-XSRFToken": self._xsrf(user)})
        assert answer.status_code == 201, answer.text
        return answer.json()["token"]

    def revoke(self, user: str, token: str) -> None:
        session = self.session(user)
        listed = requests.get(f"{self.url}/hub/api/user", headers={"Authorization": f"token {token}"}, timeout=10).json()
        answer = session.delete(f"{self.url}/hub/api/users/{user}/tokens/{listed['token_id']}", timeout=10,
                                headers={"X-XSRFToken": self._xsrf(user)})
        assert answer.status_code == 204, answer.text

    def start_server(self, user: str, token: str) -> str:
        """Start (or find) the user's JupyterLab server; its URL prefix on the hub."""
        headers = {"Authorization": f"token {token}"}
        requests.post(f"{self.api_url}/users/{user}/server", headers=headers, timeout=30)
        wait_for(lambda: requests.get(f"{self.api_url}/users/{user}", headers=headers, timeout=10).json().get("server")
                 and requests.get(f"{self.url}/user/{user}/api/status", headers=headers, timeout=10).ok,
                 timeout=60, message=f"{user}'s JupyterLab server")
        return f"{self.url}/user/{user}/"


def _stop(proc: subprocess.Popen, pid_file: Path) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)  # the hub stops the users' servers and the proxy it started
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    # A hub killed while starting can leave its proxy holding the ports: stop it by the pid it wrote, if that pid is
    # still the proxy (and not a process that reused the number).
    try:
        pid = int(pid_file.read_text().strip())
        if b"configurable-http-proxy" in Path(f"/proc/{pid}/cmdline").read_bytes():
            os.kill(pid, signal.SIGTERM)
    except (OSError, ValueError):
        pass


def run_hub(live_server, tmp_path_factory, *, spawner: str = "simple", name: str = "jupyterhub") -> Iterator[Hub]:
    """Start a hub with jupyterhub/jupyterhub_config.py and `spawner`, yield it once healthy, stop it after."""
    install_proxy()
    state = tmp_path_factory.mktemp(name)
    public, internal, proxy_api = _free_port(), _free_port(), _free_port()
    hub = Hub(url=f"http://127.0.0.1:{public}", api_url=f"http://127.0.0.1:{internal}/hub/api",
              service_token=secrets.token_hex(32), state=state, log=state / "jupyterhub.log")
    env = {
        **os.environ,
        "KAKEHASHI_HUB_API_TOKEN": hub.service_token,
        "KAKEHASHI_HUB_CALLBACK_URL": f"{live_server.url}/accounts/jupyterhub/login/callback/",
        "KAKEHASHI_PORTAL_URL": live_server.url,
        "KAKEHASHI_HUB_SHARED_PASSWORD": HUB_PASSWORD,
        "KAKEHASHI_HUB_USERS": ",".join(HUB_USERS),
        "KAKEHASHI_HUB_BIND_URL": hub.url,
        "KAKEHASHI_HUB_INTERNAL_URL": f"http://127.0.0.1:{internal}",
        "KAKEHASHI_HUB_PROXY_API_URL": f"http://127.0.0.1:{proxy_api}",
        "KAKEHASHI_HUB_STATE_DIR": str(state),
        "KAKEHASHI_HUB_SPAWNER": spawner,
        "PYTHONUNBUFFERED": "1",
    }
    with open(hub.log, "ab") as log:
        # No periodic health check of the portal service: this hub lives for the whole session, and its check (a GET
        # of /services/kakehashi/ on the live server every minute) would land in later tests that have no database.
        proc = subprocess.Popen([sys.executable, "-m", "jupyterhub", "-f", str(HUB_DIR / "jupyterhub_config.py"),
                                 "--JupyterHub.service_check_interval=0"],
                                cwd=state, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"JupyterHub exited at start:\n{hub.log.read_text()[-3000:]}")
            try:
                if requests.get(f"{hub.url}/hub/health", timeout=2).status_code == 200:
                    break
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"JupyterHub did not become healthy:\n{hub.log.read_text()[-3000:]}")
            time.sleep(0.2)
        yield hub
    finally:
        _stop(proc, state / "proxy.pid")
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shutil.copy(hub.log, ARTIFACTS / f"{name}.log")  # the hub's and the Lab servers' log, for CI


@pytest.fixture(scope="session")
def hub(live_server, tmp_path_factory) -> Iterator[Hub]:
    yield from run_hub(live_server, tmp_path_factory)


@pytest.fixture
def hub_settings(hub, live_server, settings):
    """The portal connected to the hub: its settings as the environment would set them."""
    from portal.catalog.defaults import ensure_default_presets

    settings.KAKEHASHI_HUB_URL = hub.url
    settings.KAKEHASHI_HUB_API_URL = hub.api_url
    settings.KAKEHASHI_HUB_API_TOKEN = hub.service_token
    settings.KAKEHASHI_HUB_CLIENT_ID = f"service-{SERVICE}"
    settings.KAKEHASHI_HUB_CLIENT_SECRET = hub.service_token
    settings.KAKEHASHI_HUB_CALLBACK_URL = f"{live_server.url}/accounts/jupyterhub/login/callback/"
    settings.KAKEHASHI_HUB_TOKEN_CACHE_SECONDS = 60
    ensure_default_presets()
    return settings


@pytest.fixture
def hub_portal(hub, hub_settings, local_site, make_user):
    """The portal on the hub with the accounts of local_site (alice owns project "vision") plus bob (project "nlp"
    only); carol has no portal account."""
    from portal.projects.models import Membership, Role

    bob = make_user("bob")
    Membership.objects.create(user=bob, project=local_site.other, role=Role.MEMBER)
    local_site.bob = bob
    local_site.hub = hub
    return local_site


@pytest.fixture(scope="session")
def session_hub(live_server, tmp_path_factory):
    """A hub whose servers are Kakehashi sessions (KAKEHASHI_HUB_SPAWNER=kakehashi)."""
    yield from run_hub(live_server, tmp_path_factory, spawner="kakehashi", name="sessionhub")


@pytest.fixture
def sessions_site(hpc_site, session_hub, live_server, settings):
    """hpc_site (alice owns "vision", her accounts on every test cluster) with the portal connected to the sessions
    hub, and its address as compute nodes reach it."""
    settings.KAKEHASHI_HUB_URL = session_hub.url
    settings.KAKEHASHI_HUB_API_URL = session_hub.api_url
    settings.KAKEHASHI_HUB_API_TOKEN = session_hub.service_token
    settings.KAKEHASHI_HUB_CLIENT_ID = "service-kakehashi"
    settings.KAKEHASHI_HUB_CLIENT_SECRET = session_hub.service_token
    settings.KAKEHASHI_HUB_CALLBACK_URL = f"{live_server.url}/accounts/jupyterhub/login/callback/"
    settings.KAKEHASHI_SITE_URL = live_server.url
    # The worker removes an ended session's server from the hub (portal/sessions/tasks.py) and reads its servers'
    # activity for the idle rule (portal/sessions/activity.py): it must know the hub. It also lets a project's idle
    # rule have a window of seconds (the idle-session test's; this process lowers the bound in that test only),
    # so that its own sample reader judges sessions by the same rule as the test's, never by the site's.
    live_worker_knows(KAKEHASHI_HUB_URL=session_hub.url, KAKEHASHI_HUB_API_URL=session_hub.api_url,
                      KAKEHASHI_HUB_API_TOKEN=session_hub.service_token,
                      KAKEHASHI_HUB_CALLBACK_URL=settings.KAKEHASHI_HUB_CALLBACK_URL,
                      KAKEHASHI_IDLE_MIN_WINDOW_SECONDS="1")
    for user in HUB_USERS[:2]:
        session_hub.session(user)  # the hub knows a user once they have signed in
    hpc_site.hub = session_hub
    yield hpc_site
    # A test that failed half-way leaves no session behind: the hub stops its servers (its spawner cancels through
    # the portal), and what still runs on Slurm is cancelled by its id.
    from portal.jobs.models import ACTIVE_STATES
    from portal.sessions.models import Session

    for session in Session.objects.select_related("job").filter(job__state__in=ACTIVE_STATES):
        requests.delete(f"{session_hub.api_url}/users/{session.hub_user}/servers/{session.server_name}", timeout=30,
                        headers={"Authorization": f"token {session_hub.service_token}"})
        if session.job.scheduler_id.isdigit() and session.job.cluster.kind == "slurm":
            subprocess.run(["scancel", session.job.scheduler_id], check=False, capture_output=True)


@pytest.fixture
def session_tunnels(sessions_site, django_db_blocker) -> Iterator[TunnelProcess]:
    """The tunnel process, running for this test (its log: test-artifacts/session-tunnels.log)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    tunnels = TunnelProcess(ARTIFACTS / "session-tunnels.log")
    tunnels.start()
    yield tunnels
    tunnels.stop()


def hub_server(hub: Hub, user: str, name: str, *, stopped: bool = False) -> dict | None:
    """The user's named server as the hub's API shows it: a running or starting one, or (`stopped`) one the hub
    still keeps stopped, which counts against its named_server_limit_per_user."""
    answer = requests.get(f"{hub.api_url}/users/{user}", timeout=10, params={"include_stopped_servers": "1"} if stopped else {},
                          headers={"Authorization": f"token {hub.service_token}"})
    return answer.json().get("servers", {}).get(name)


def notebook(source: str = "print(f'result={lr * epochs}')", parameters: str = "lr = 0.1\nepochs = 1") -> dict:
    cells = [
        {"cell_type": "code", "id": "params", "metadata": {"tags": ["parameters"]}, "execution_count": None,
         "outputs": [], "source": parameters},
        {"cell_type": "code", "id": "body", "metadata": {}, "execution_count": None, "outputs": [], "source": source},
    ]
    return {"nbformat": 4, "nbformat_minor": 5, "cells": cells,
            "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}}
