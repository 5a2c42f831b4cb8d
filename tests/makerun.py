"""`make run`'s stack for tests: the launcher (`python -m portal.dev.devserver`, what `make run` runs) in a temporary var
directory on a free port, with the embedded defaults of a developer's shell: SQLite, the file-system broker, the local
backend, the demo data."""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import requests

from tests.processes import descendants
from tests.seaweedfs import free_port

ROOT = Path(__file__).resolve().parents[1]
FINAL = {"completed", "failed", "cancelled", "timed_out", "lost"}


def _embedded_env(var: Path, port: int, **overrides: str) -> dict[str, str]:
    """The environment of a developer's shell: none of the test suite's PostgreSQL, Redis or S3 settings."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("KAKEHASHI_", "CELERY_", "DATABASE_", "REDIS_", "DJANGO_", "CACHE_"))}
    env.update({
        "KAKEHASHI_VAR_DIR": str(var),
        "KAKEHASHI_ADDRESS": f"127.0.0.1:{port}",
        # A dispatch whose message died with a killed worker is sent again after this long (a local submit
        # takes well under a second: its lease need not cover an SSH timeout).
        "KAKEHASHI_RECOVER_INTERVAL": "10",
        "KAKEHASHI_STALE_DISPATCH_SECONDS": "20",
        "KAKEHASHI_DISPATCH_LEASE_SECONDS": "15",
        "KAKEHASHI_API_RATE": "100000/min",
        "PYTHONUNBUFFERED": "1",
        # The portal alone unless a test asks for more: test_make_run_hybrid.py runs the S3 server and the hub.
        "KAKEHASHI_RUN": "minimal",
        **overrides,
    })
    return env


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def migrated_database(root: Path) -> Path:
    """A SQLite database migrated as `make run` migrates a new one, made once under `root` (a file lock lets one
    process make it while others wait). A stack whose test is not about a first start begins with a copy: its launcher
    then finds nothing to migrate (3-4 s where a new database takes 10-11 s on a busy 2-core machine)."""
    made = root / "make-run-migrated.sqlite3"
    with open(root / "make-run-migrated.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not made.exists():
            var = root / "make-run-migrating"
            var.mkdir(exist_ok=True)
            subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v0"], cwd=ROOT, check=True,
                           env=_embedded_env(var, free_port()), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            (var / "kakehashi.sqlite3").rename(made)  # there only once migrated
    return made


class Stack:
    """One `make run`: the launcher in its own process group, its output in a file. With `database` (a migrated one,
    see migrated_database), the stack starts from a copy of it instead of a new database."""

    def __init__(self, var: Path, database: Path | None = None, **env: str) -> None:
        self.var = var
        self.port = free_port()
        self.env = _embedded_env(var, self.port, **env)
        self.log_path = var / "make-run.log"
        self.base = f"http://127.0.0.1:{self.port}"
        var.mkdir(parents=True, exist_ok=True)
        if database is not None:
            shutil.copyfile(database, var / "kakehashi.sqlite3")
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen([sys.executable, "-m", "portal.dev.devserver"], cwd=ROOT, env=self.env,
                                     stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_ready(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"make run exited {self.proc.returncode}:\n{self.log()[-3000:]}"
            try:
                if requests.get(f"{self.base}/healthz", timeout=2).status_code == 200 and self.worker_pid():
                    if "ready." in self.log():
                        return
            except requests.RequestException:
                pass
            time.sleep(0.5)
        raise AssertionError(f"make run not ready in {timeout} s:\n{self.log()[-3000:]}")

    def worker_pid(self) -> int | None:
        for pid, command in descendants(self.proc.pid).items():
            if re.search(r"celery -A workers worker", command) and self._parent(pid) == self.proc.pid:
                return pid
        return None

    @staticmethod
    def _parent(pid: int) -> int:
        try:
            return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])
        except OSError:
            return -1

    def token(self) -> str:
        done = subprocess.run([sys.executable, "manage.py", "issue_token", "demo", "--scope", "submit",
                               "--scope", "read"], cwd=ROOT, env=self.env, capture_output=True, text=True, check=True)
        return done.stdout.strip()

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        # Whatever the launcher left (the tests below look for leftovers themselves) is not left for others.
        for pid in descendants(self.proc.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._log.close()
