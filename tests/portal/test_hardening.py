"""The production profile behind its TLS proxy: Django's deployment checks pass, plain HTTP is redirected, browsers
are told to stay on HTTPS, cookies are secure, and every page carries the Content-Security-Policy."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from django.db import connection

from tests.seaweedfs import free_port

ROOT = Path(__file__).resolve().parents[2]
HOST = "portal.example.ac.jp"


def _production_env(var_dir: Path, **extra: str) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items()
            if not k.startswith(("KAKEHASHI_", "SECRET_KEY", "DATABASE_URL", "DEBUG", "CELERY_", "REDIS_URL", "CACHE_",
                                 "SECURE_", "DJANGO_SETTINGS_MODULE", "DJANGO_ALLOW_ASYNC_UNSAFE"))}
    return {
        **keep,
        "KAKEHASHI_PROFILE": "production",
        "SECRET_KEY": "k8Yq2v9WzR4tN7pL1xC6bM3hJ5sD0fGaE-Uo_iKrTyQw-3nVb7Xe",
        "KAKEHASHI_ENCRYPTION_KEYS": "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
        "KAKEHASHI_VAR_DIR": str(var_dir),
        "ALLOWED_HOSTS": HOST,
        "CSRF_TRUSTED_ORIGINS": f"https://{HOST}",
        **extra,
    }


def test_the_deployment_checks_pass_in_the_production_profile(tmp_path):
    result = subprocess.run([sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"], cwd=ROOT,
                            env=_production_env(tmp_path), capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues (0 silenced)" in result.stdout


def _free_port() -> int:
    return free_port()  # below the ephemeral range: no outgoing connection takes it before the server binds it


@pytest.fixture
def production_portal(transactional_db, tmp_path):
    """gunicorn in the production profile on this run's test database, its static files collected as the image does."""
    db = connection.settings_dict
    env = _production_env(tmp_path, DATABASE_URL=f"postgres://{db['USER'] or 'postgres'}@{db['HOST'] or '127.0.0.1'}:"
                                                  f"{db['PORT'] or 5432}/{db['NAME']}")
    subprocess.run([sys.executable, "manage.py", "collectstatic", "--noinput", "-v0"], cwd=ROOT, env=env, check=True)
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "gunicorn", "portal.wsgi:application", "--bind", f"127.0.0.1:{port}",
                             "--workers", "1"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            requests.get(f"{url}/healthz", timeout=15)
            break
        except requests.ConnectionError:
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read().decode()[-3000:]
            time.sleep(0.2)
    yield url
    proc.terminate()
    proc.wait(timeout=10)


def test_behind_the_proxy_http_is_redirected_and_https_is_hardened(production_portal, make_user):
    from django.contrib.auth.hashers import PBKDF2PasswordHasher

    alice = make_user("alice")  # hashed the way production hashes (the tests' fast hasher is not enabled there)
    alice.password = PBKDF2PasswordHasher().encode("pw-for-tests-123", PBKDF2PasswordHasher().salt())
    alice.save()
    via_proxy = {"Host": HOST, "X-Forwarded-Proto": "https"}
    plain = requests.get(f"{production_portal}/accounts/login/", headers={"Host": HOST}, allow_redirects=False, timeout=10)
    assert plain.status_code == 301 and plain.headers["Location"] == f"https://{HOST}/accounts/login/"
    # The load balancer's health check still answers over plain HTTP.
    assert requests.get(f"{production_portal}/healthz", headers={"Host": HOST}, timeout=10).status_code == 200

    page = requests.get(f"{production_portal}/accounts/login/", headers=via_proxy, timeout=10)
    assert page.status_code == 200
    assert page.headers["Strict-Transport-Security"] == "max-age=31536000; includeSubDomains; preload"
    assert page.headers["X-Content-Type-Options"] == "nosniff" and page.headers["X-Frame-Options"] == "DENY"
    assert page.headers["Referrer-Policy"] == "same-origin"
    csp = page.headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp and "'unsafe-eval'" not in csp.split()
    assert re.search(r"csrftoken=[^;]+;.*Secure", page.headers["Set-Cookie"])

    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
    # The proxy speaks HTTPS to the browser; here the cookie goes back by hand over the loopback's plain HTTP
    # (a client keeps a Secure cookie off plain HTTP, which is the point of it).
    signed_in = requests.post(f"{production_portal}/accounts/login/", data={
        "csrfmiddlewaretoken": csrf, "login": "alice", "password": "pw-for-tests-123",
    }, headers={**via_proxy, "Referer": f"https://{HOST}/accounts/login/",
                "Cookie": f"csrftoken={page.cookies['csrftoken']}"}, allow_redirects=False, timeout=10)
    assert signed_in.status_code == 302, signed_in.text[:2000]
    cookie = next(c for c in signed_in.raw.headers.getlist("Set-Cookie") if c.startswith("sessionid="))
    assert "Secure" in cookie and "HttpOnly" in cookie
