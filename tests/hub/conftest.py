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
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import requests

from tests.browser.conftest import new_page, page, shots  # noqa: F401 - the browser tests' fixtures, here too
from tests.conftest import ROOT, wait_for

HUB_DIR = ROOT / "jupyterhub"
PROXY = HUB_DIR / "node_modules" / ".bin" / "configurable-http-proxy"
HUB_PASSWORD = "hub-password-for-tests"
HUB_USERS = ("alice", "bob", "carol")
SERVICE = "kakehashi"
ARTIFACTS = ROOT / "test-artifacts"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


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


@pytest.fixture(scope="session")
def hub(live_server, tmp_path_factory) -> Iterator[Hub]:
    install_proxy()
    state = tmp_path_factory.mktemp("jupyterhub")
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
        shutil.copy(hub.log, ARTIFACTS / "jupyterhub.log")  # the hub's and the Lab servers' log, for CI


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


def notebook(source: str = "print(f'result={lr * epochs}')", parameters: str = "lr = 0.1\nepochs = 1") -> dict:
    cells = [
        {"cell_type": "code", "id": "params", "metadata": {"tags": ["parameters"]}, "execution_count": None,
         "outputs": [], "source": parameters},
        {"cell_type": "code", "id": "body", "metadata": {}, "execution_count": None, "outputs": [], "source": source},
    ]
    return {"nbformat": 4, "nbformat_minor": 5, "cells": cells,
            "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}}
