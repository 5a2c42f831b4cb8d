"""`make run`: the development web server, a Celery worker and Celery beat, supervised (docs/decisions/0015).

- Each child runs in a session of its own, so a signal meant for `make run` (Ctrl-C in the terminal, SIGTERM to
  the whole process group) reaches the launcher alone, which then stops the children in order: SIGTERM to the
  child, a few seconds' grace, then SIGKILL to everything left in the child's session (pool processes too).
  Local jobs are started in sessions of their own by the local backend: stopping `make run` leaves them
  running, and the next `make run` tracks them again.
- A child that dies while the launcher runs is restarted (after 1, 2, 4 … 10 s), at most RESTART_LIMIT times in
  RESTART_WINDOW seconds; past that the launcher stops everything and exits 1, saying which child and how.
- If the launcher itself is killed (kill -9), the kernel sends its children SIGTERM (PR_SET_PDEATHSIG).
- Exit status: 0 never happens by surprise; 128 + the signal's number when stopped by SIGINT (130), SIGTERM (143)
  or SIGHUP (129); 1 when a child keeps dying or the preparation (migrate, demo data) fails; 2 when the address
  is taken.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from portal.dev import devstack

ROOT = Path(__file__).resolve().parents[2]
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# A child may be restarted this many times in this many seconds; then something is wrong that a restart won't fix.
RESTART_LIMIT = int(os.environ.get("KAKEHASHI_RESTART_LIMIT", "5"))
RESTART_WINDOW = 300.0
# A worker's warm shutdown (finish the task at hand, give back prefetched messages) takes 3-8 s on a busy machine.
STOP_GRACE = float(os.environ.get("KAKEHASHI_STOP_GRACE", "10"))
_PR_SET_PDEATHSIG = 1


def say(message: str) -> None:
    print(f"[make run] {message}", file=sys.stderr, flush=True)


def _die_with_parent(parent: int) -> None:
    """In the child before exec: be sent SIGTERM when the launcher dies, even by kill -9."""
    os.setsid()
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux: the launcher's own stop still reaches the children
    if os.getppid() != parent:
        os._exit(1)  # the launcher died before the request took effect


def _how(returncode: int) -> str:
    if returncode < 0:
        return f"killed by {signal.Signals(-returncode).name}"
    return f"exited with status {returncode}"


@dataclass
class Child:
    name: str
    argv: list[str]
    proc: subprocess.Popen | None = None
    restarts: deque = field(default_factory=deque)
    restart_at: float | None = None
    last_exit: str = ""
    extra_env: dict[str, str] = field(default_factory=dict)
    log: Path | None = None  # where its output goes, if not the terminal

    def start(self, env: dict[str, str]) -> None:
        parent = os.getpid()
        out = None
        if self.log is not None:
            self.log.parent.mkdir(parents=True, exist_ok=True)
            out = open(self.log, "ab")  # noqa: SIM115 - the child holds it; closed here once it has it
        try:
            self.proc = subprocess.Popen(self.argv, cwd=ROOT, env={**env, **self.extra_env}, stdout=out,
                                         stderr=subprocess.STDOUT if out else None,
                                         preexec_fn=lambda: _die_with_parent(parent))
        finally:
            if out is not None:
                out.close()
        self.restart_at = None

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal_group(self, signum: int) -> None:
        """Signal everything in the child's session (its process group: it leads both)."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signum)
        except (ProcessLookupError, PermissionError):
            pass

    def died(self, now: float) -> bool:
        """Note an unexpected exit; True when the child may be restarted once more."""
        assert self.proc is not None and self.proc.returncode is not None
        self.last_exit = _how(self.proc.returncode)
        self.signal_group(signal.SIGKILL)  # what it leaves behind (pool processes) goes with it
        while self.restarts and now - self.restarts[0] > RESTART_WINDOW:
            self.restarts.popleft()
        if len(self.restarts) >= RESTART_LIMIT:
            return False
        self.restarts.append(now)
        delay = min(2.0 ** (len(self.restarts) - 1), 10.0)
        self.restart_at = now + delay
        say(f"the {self.name} {self.last_exit}: restarting it in {delay:.0f} s "
            f"(restart {len(self.restarts)} of {RESTART_LIMIT} allowed in {RESTART_WINDOW:.0f} s)")
        return True


def stop_all(children: list[Child], grace: float = STOP_GRACE) -> None:
    """SIGTERM each child, wait up to `grace` seconds, then SIGKILL whatever is left in their sessions."""
    for child in children:
        if child.running():
            child.proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace
    for child in children:
        if child.proc is None:
            continue
        try:
            child.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            say(f"the {child.name} did not stop within {grace:.0f} s: killing it")
        child.signal_group(signal.SIGKILL)
        try:
            child.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            say(f"the {child.name} (pid {child.proc.pid}) survived SIGKILL")


def address_free(address: str) -> bool:
    host, _, port = address.rpartition(":")
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as runserver binds: TIME_WAIT does not count
        try:
            sock.bind((host.strip("[]") or "127.0.0.1", int(port)))
        except OSError:
            return False
    return True


def children_for(var: Path, address: str) -> list[Child]:
    celery = [sys.executable, "-m", "celery", "-A", "workers"]
    return [
        # --insecure: the static files, which runserver serves only under DEBUG (main() turns DEBUG off).
        Child("web server", [sys.executable, "manage.py", "runserver", address, "--noreload", "--insecure"]),
        # Gossip, mingle and heartbeats talk between workers: there is one, and each would be broker traffic.
        Child("worker", [*celery, "worker", "--concurrency", "2", "--loglevel", "INFO", "--hostname", "kakehashi@%h",
                         "--without-gossip", "--without-mingle", "--without-heartbeat"]),
        # Beat in a process of its own: restarted alone, and never left "Shutting down..." inside the worker.
        Child("beat", [*celery, "beat", "--schedule", str(var / "beat-schedule"), "--loglevel", "INFO"]),
    ]


def prepare(env: dict[str, str]) -> str:
    """Migrate and create the demo data, in one process (each Django process costs seconds to start); the error, if
    any. The command's traceback above the error says which step failed."""
    step = ["setup_demo", "--migrate"]
    done = subprocess.run([sys.executable, "manage.py", *step], cwd=ROOT, env=env)
    if done.returncode != 0:
        return f"`manage.py {' '.join(step)}` {_how(done.returncode)}"
    return ""


def main() -> int:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": os.environ.get("DJANGO_SETTINGS_MODULE", "portal.settings")}
    env.setdefault("KAKEHASHI_TRACK_INTERVAL", "2")  # a demo should feel live
    # Django's DEBUG pages list every URL pattern and the settings: not even on loopback (issue 25). A failing page
    # says so in the portal's own words; its traceback is in this terminal (DEBUG=true brings them back).
    env.setdefault("DEBUG", "false")
    var = Path(env.get("KAKEHASHI_VAR_DIR", ROOT / "var"))
    for sub in ("processed", "control", "tmp"):
        (var / "broker" / sub).mkdir(parents=True, exist_ok=True)
    address = env.get("KAKEHASHI_ADDRESS", "127.0.0.1:8000")

    received: list[int] = []

    def on_signal(signum: int, _frame: object) -> None:
        received.append(signum)
        if len(received) > 1:
            say(f"{signal.Signals(signum).name} again: killing everything now")
            for child in children:
                child.signal_group(signal.SIGKILL)

    children: list[Child] = []
    for signum in STOP_SIGNALS:
        signal.signal(signum, on_signal)

    if not address_free(address):
        say(f"{address} is in use by another program: stop it, or choose another with KAKEHASHI_ADDRESS=host:port")
        return 2
    # The hybrid half (portal/dev/devstack.py): an S3 server and JupyterHub, unless KAKEHASHI_RUN=minimal.
    stack = devstack.plan(env, var, address)
    env.update(stack.env)
    if error := prepare(env):
        say(f"{error}: not starting")
        return 1 if not received else 128 + received[0]
    if received:
        say(f"stopped by {signal.Signals(received[0]).name} before starting")
        return 128 + received[0]

    first = [Child(s.name, s.argv, extra_env=s.env, log=s.log) for s in stack.services if not s.after_web]
    last = [Child(s.name, s.argv, extra_env=s.env, log=s.log) for s in stack.services if s.after_web]
    children.extend(first)
    for child in first:
        child.start(env)
    try:
        for step in stack.prepare:  # the bucket and its CORS rule, once the store answers
            step()
    except Exception as exc:  # noqa: BLE001 - whatever it was, the portal cannot keep files there: say it and stop
        say(f"the object store did not become ready: {exc}")
        stop_all(children)
        return 1
    portal = children_for(var, address)
    children.extend(portal + last)
    for child in portal + last:
        child.start(env)
    say(f"Kakehashi on http://{address}/ (Ctrl-C to stop)")
    for line in stack.lines:
        say(line)

    failure = ""
    while not received and not failure:
        time.sleep(0.2)
        now = time.monotonic()
        for child in children:
            if child.restart_at is not None:
                if now >= child.restart_at and not received:
                    child.start(env)
            elif not child.running() and not received:
                if not child.died(now):
                    failure = (f"the {child.name} {child.last_exit} again, after {RESTART_LIMIT} restarts in "
                               f"{RESTART_WINDOW:.0f} s: stopping everything (its log is above)")
                    break

    if received:
        say(f"{signal.Signals(received[0]).name} received: stopping {', '.join(c.name for c in children)}")
    else:
        say(failure)
    stop_all(children)
    if received:
        say("stopped")
        return 128 + received[0]
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
