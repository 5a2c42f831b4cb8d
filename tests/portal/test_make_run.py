"""`make run`'s stack survives a busy session and stops however it is stopped (issues 12 and 16).

Each test starts the launcher itself (`python -m portal.dev.devserver`, what `make run` runs) in a temporary var
directory on a free port, with the embedded defaults: SQLite, the file-system broker, the local backend.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest
import requests

from tests.makerun import FINAL, ROOT, Stack, _alive, _embedded_env, _port_free
from tests.processes import descendants


@pytest.fixture
def make_run(tmp_path, make_run_database):
    """Start `make run`; its database is already migrated (what these tests check begins once it runs; a first start
    from nothing is test_make_run_hybrid.py's)."""
    stacks: list[Stack] = []

    def start(**env: str) -> Stack:
        stack = Stack(tmp_path / f"var{len(stacks)}", make_run_database, **env)
        stacks.append(stack)
        stack.wait_ready()
        return stack

    yield start
    for stack in stacks:
        stack.close()


def _job_body(n: int) -> dict:
    return {"project": "demo", "name": f"busy-{n}", "hardware": "local-cpu", "nodes": 1, "walltime": "00:05:00",
            "script": f"echo job {n}\nsleep 1\n"}


# How long the four researchers keep submitting: minutes, as issue 12 asks (KAKEHASHI_TEST_MAKE_RUN_SECONDS to
# shorten it while working on the launcher, or to run it for longer).
BUSY_SECONDS = float(os.environ.get("KAKEHASHI_TEST_MAKE_RUN_SECONDS", "120"))
RESEARCHERS = 4


@pytest.mark.long
@pytest.mark.timeout(BUSY_SECONDS + 600)  # start, the busy time, then the jobs' end with no progress for 90 s at most
def test_concurrent_submits_with_the_worker_killed_midway_end_every_job_and_never_lock_the_database(
    make_run,
):
    stack = make_run()
    token = stack.token()
    headers = {"Authorization": f"Bearer {token}"}
    submitted: list[int] = []
    submits: dict[int, list[float]] = {who: [] for who in range(RESEARCHERS)}  # when each researcher's jobs were taken
    errors: list[str] = []
    lock = threading.Lock()
    started = time.monotonic()
    stop_at = started + BUSY_SECONDS

    def researcher(who: int) -> None:
        # Submits, then clicks around as a person watching would: the job, the list.
        session = requests.Session()
        session.headers.update(headers)
        n = 0
        while time.monotonic() < stop_at:
            n += 1
            try:
                response = session.post(f"{stack.base}/api/v1/jobs/", json=_job_body(who * 10000 + n), timeout=60)
                if response.status_code != 201:
                    errors.append(f"submit {response.status_code}: {response.text[:300]}")
                    continue
                job_id = response.json()["id"]
                with lock:
                    submitted.append(job_id)
                    submits[who].append(time.monotonic())
                for url in (f"/api/v1/jobs/{job_id}/", "/api/v1/jobs/?limit=20"):
                    got = session.get(f"{stack.base}{url}", timeout=60)
                    if got.status_code != 200:
                        errors.append(f"GET {url} {got.status_code}: {got.text[:300]}")
            except requests.RequestException as exc:
                errors.append(f"request failed: {exc}")
            time.sleep(1)

    threads = [threading.Thread(target=researcher, args=(i,)) for i in range(RESEARCHERS)]
    for thread in threads:
        thread.start()

    # Before halfway, the worker dies the hardest way: the launcher starts another and jobs go on completing.
    time.sleep(BUSY_SECONDS * 0.45)
    killed = stack.worker_pid()
    assert killed
    with lock:
        before_kill = len(submitted)
    killed_at = time.monotonic()
    os.kill(killed, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (stack.worker_pid() in (None, killed)):
        time.sleep(0.5)
    assert stack.worker_pid() not in (None, killed), stack.log()[-3000:]

    for thread in threads:
        thread.join()
    assert not errors, errors[:5]
    # Every researcher kept submitting before and after the kill (no count that a slow machine would miss).
    assert all(any(t < killed_at for t in times) and any(t > killed_at for t in times) for times in submits.values()), \
        {who: (sum(t < killed_at for t in times), sum(t > killed_at for t in times)) for who, times in submits.items()}
    submits_ended = time.monotonic()

    # The jobs end: wait as long as they keep ending, and fail once none has ended for 90 s.
    session = requests.Session()
    session.headers.update(headers)
    states: dict[int, str] = {}
    ended, last_progress = 0, time.monotonic()
    while time.monotonic() - last_progress < 90:
        for job_id in submitted:
            if states.get(job_id) not in FINAL:
                states[job_id] = session.get(f"{stack.base}/api/v1/jobs/{job_id}/", timeout=30).json()["state"]
        if all(state in FINAL for state in states.values()):
            break
        now_ended = sum(state in FINAL for state in states.values())
        if now_ended > ended:
            ended, last_progress = now_ended, time.monotonic()
        time.sleep(2)
    unfinished = {j: s for j, s in states.items() if s not in FINAL}
    assert not unfinished, (f"{len(unfinished)} of {len(submitted)} jobs never ended (none for 90 s): "
                            f"{list(unfinished.items())[:10]}")
    assert set(states.values()) == {"completed"}, {s: list(states.values()).count(s) for s in set(states.values())}

    log = stack.log()
    assert "the worker killed by SIGKILL: restarting it" in log
    # Nothing failed anywhere: no request, no task (Celery logs a failed task as "raised unexpected").
    trouble = {what: log.count(what) for what in ("database is locked", "JSONDecodeError", "Unrecoverable error",
                                                  "raised unexpected", "Traceback")}
    assert not any(trouble.values()), trouble
    assert stack.proc.poll() is None
    print(f"{len(submitted)} jobs submitted by {RESEARCHERS} researchers in {BUSY_SECONDS:.0f} s, all completed "
          f"{time.monotonic() - submits_ended:.0f} s after the last submit; the worker was killed after "
          f"{killed_at - started:.0f} s and {before_kill} jobs")


STOPS = {
    "sigint-as-ctrl-c-sends-it-to-the-group": (signal.SIGINT, True),
    "sigterm-to-the-launcher": (signal.SIGTERM, False),
    "sigterm-to-the-whole-group": (signal.SIGTERM, True),
    "sighup-to-the-launcher": (signal.SIGHUP, False),
}


@pytest.mark.parametrize("how", list(STOPS))
def test_make_run_stops_every_child_and_frees_the_port_however_it_is_stopped(make_run, how):
    signum, to_group = STOPS[how]
    stack = make_run()
    children = descendants(stack.proc.pid)
    assert any("runserver" in c for c in children.values())
    assert any("worker" in c for c in children.values()) and any(" beat " in c for c in children.values())
    assert not _port_free(stack.port)

    started = time.monotonic()
    if to_group:
        os.killpg(stack.proc.pid, signum)
    else:
        os.kill(stack.proc.pid, signum)
    returncode = stack.proc.wait(timeout=30)
    took = time.monotonic() - started

    left = {pid: command for pid, command in children.items() if _alive(pid)}
    assert not left, f"left running after {how}: {left}"
    assert _port_free(stack.port)
    assert returncode == 128 + signum
    assert f"{signal.Signals(signum).name} received: stopping" in stack.log()
    assert took < 15, f"stopping took {took:.1f} s"
    print(f"{how}: everything stopped in {took:.1f} s, exit status {returncode}")


def test_a_worker_that_keeps_dying_stops_make_run_with_an_error_saying_so(make_run):
    stack = make_run(KAKEHASHI_RESTART_LIMIT="1")
    for _ in range(2):
        pid = stack.worker_pid()
        assert pid
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and stack.worker_pid() in (pid, None) and stack.proc.poll() is None:
            time.sleep(0.3)
    assert stack.proc.wait(timeout=30) == 1
    log = stack.log()
    assert "the worker killed by SIGKILL: restarting it" in log
    assert "the worker killed by SIGKILL again, after 1 restarts in 300 s: stopping everything" in log
    assert _port_free(stack.port)


def test_make_run_on_a_taken_port_says_so_and_exits_2(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = _embedded_env(tmp_path, port)
        done = subprocess.run([sys.executable, "-m", "portal.dev.devserver"], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=60)
    assert done.returncode == 2
    assert f"127.0.0.1:{port} is in use by another program" in done.stderr


def test_killing_make_run_outright_still_stops_its_children_and_frees_the_port(make_run):
    stack = make_run()
    children = descendants(stack.proc.pid)
    os.kill(stack.proc.pid, signal.SIGKILL)
    stack.proc.wait(timeout=10)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and any(_alive(pid) for pid in children):
        time.sleep(0.2)
    assert not {pid: command for pid, command in children.items() if _alive(pid)}
    assert _port_free(stack.port)
