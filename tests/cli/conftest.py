"""Run the installed `kakehashi` console script as a subprocess against a live portal (pytest-django's live_server)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(sys.executable).parent / "kakehashi"


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self):
        return json.loads(self.out)


@pytest.fixture(scope="session")
def kakehashi_script() -> Path:
    if not SCRIPT.exists():
        pytest.fail(f"{SCRIPT} is missing: install the CLI with `make dev-venv` (requirements-dev.txt has -e ./cli)")
    return SCRIPT


@pytest.fixture
def cli_home(tmp_path) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    return home


@pytest.fixture
def kh(kakehashi_script, cli_home):
    """kh("status", "--json", env={...}, stdin="...") -> Result of the real command in a clean environment."""

    def run(*args: str, env: dict | None = None, stdin: str | None = None, timeout: float = 120) -> Result:
        clean = {k: v for k, v in os.environ.items() if not k.startswith("KAKEHASHI_")}
        clean.update(
            HOME=str(cli_home),
            KAKEHASHI_CONFIG=str(cli_home / "kh" / "config.json"),
            # The installed entry point, importing this checkout's code even if an older copy were installed.
            PYTHONPATH=str(ROOT / "cli"),
        )
        clean.pop("XDG_CONFIG_HOME", None)
        clean.update(env or {})
        proc = subprocess.run([str(kakehashi_script), *args], capture_output=True, text=True, env=clean,
                              input=stdin if stdin is not None else "", timeout=timeout)
        return Result(proc.returncode, proc.stdout, proc.stderr)

    return run


@pytest.fixture
def alice_token(local_site) -> str:
    from portal.api.tokens import issue_token

    return issue_token(local_site.alice, name="cli-tests", scopes=["read", "submit"])[1]


@pytest.fixture
def logged_in(kh, live_server, alice_token, settings, tmp_path):
    settings.MEDIA_ROOT = str(tmp_path / "media")
    result = kh("login", "--url", live_server.url, "--token", alice_token)
    assert result.code == 0, result.err
    return kh
