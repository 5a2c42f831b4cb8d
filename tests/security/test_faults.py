"""Faults of the services the portal stands on, each test leaving them as it found them.

Already tested elsewhere (extended, not repeated, here): an unreachable login node keeps a job submitting and says
why, tracking an unreachable cluster changes no job, a worker killed after sbatch submits nothing twice, a queue
message lost in a Redis restart is sent again (tests/jobs/test_crash_recovery.py).
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
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
