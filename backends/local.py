"""The local backend: jobs run as subprocesses on the host the transport reaches, one directory per job.

No scheduler: a small runner script plays its part (walltime via `timeout`, an exit-code file as
accounting). It is what `make run` uses, and it behaves like the HPC backends so the portal needs no special
case: statuses() reports queued/running jobs, final_records() reports finished ones.
"""

from __future__ import annotations

import functools
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime

from backends.base import (
    Access,
    Backend,
    JobRecord,
    JobSpec,
    JobStatus,
    Load,
    Reach,
    State,
    SubmitRefused,
)
from backends.safety import check_path
from backends.script import Dialect, recorded_id_command, staged_command, staging_archive
from backends.shell import ShellBackend
from backends.transport import CommandResult, LocalTransport

RUNNER = """#!/bin/bash
# Kakehashi local runner: runs job.sh under a walltime and records what a scheduler's accounting would.
cd "$(dirname "$0")" || exit 1
echo "$$" > runner.pid
echo "$1" > walltime
date +%s > started
if [ -f cancelled ]; then echo 143 > exit_code.tmp; mv exit_code.tmp exit_code; date +%s > ended; exit 0; fi
# The job's id is its directory, as the portal's pages name it; the runner's pid keeps two jobs' ports apart.
export KAKEHASHI_LOCAL_JOB_ID="${PWD##*/}" KAKEHASHI_LOCAL_PID="$$"
timeout --kill-after=10 "$1" bash job.sh > stdout.log 2> stderr.log < /dev/null &
echo "$!" > job.pid
wait "$!"
rc=$?
date +%s > ended
echo "$rc" > exit_code.tmp && mv exit_code.tmp exit_code
"""

_TIMEOUT_CODES = {124, 137}


class LocalBackend(ShellBackend):
    kind = "local"
    cancel_program = "kill"
    scheduler_name = "local"
    reach = Reach.LOCAL
    submit_timeout = 60
    dialect = Dialect(hosts_command="hostname", job_id_var="KAKEHASHI_LOCAL_JOB_ID", port_seed_var="KAKEHASHI_LOCAL_PID")

    @classmethod
    def connect(cls, access: Access, settings: Mapping[str, object] | None = None) -> Backend:
        # Local jobs see their Python's environment first (python, papermill for notebook jobs, torchrun).
        return cls(LocalTransport(access.local_root, path_prefix=[os.path.dirname(job_python(settings))]), settings)

    @classmethod
    def job_dir(cls, work_root: str, name: str) -> str:
        return name  # relative to the transport's job root

    def directives(self, spec: JobSpec) -> list[str]:
        return []

    def check_ids(self, scheduler_ids: Sequence[str]) -> list[str]:
        # A local job's id is its directory.
        return list(dict.fromkeys(check_path(i, what="job id") for i in scheduler_ids))

    def _job_id(self, spec: JobSpec) -> str:
        return check_path(spec.workdir or spec.name, what="job directory")

    def submit_command(self, spec: JobSpec) -> list[str]:
        return ["setsid", "bash", "run.sh", f"{int(spec.walltime_seconds)}s"]

    def submit_shell(self, spec: JobSpec) -> str:
        job_id = self._job_id(spec)
        launch = f"{shlex.join(self.submit_command(spec))} < /dev/null > /dev/null 2>&1 & echo {shlex.quote(job_id)}"
        return staged_command(job_id, launch)

    def staging_archive(self, spec: JobSpec, script: str) -> bytes:
        return staging_archive(replace(spec, files={**spec.files, "run.sh": RUNNER.encode()}), script)

    def parse_submit(self, result: CommandResult) -> str:
        if not result.ok:
            raise SubmitRefused(f"the local runner could not start the job: {result.message}")
        return result.stdout.strip().splitlines()[-1]

    def find_command(self, spec: JobSpec) -> str:
        return recorded_id_command(self._job_id(spec))

    def parse_find(self, stdout: str) -> str | None:
        return stdout.strip() or None

    def status_command(self, scheduler_ids: Sequence[str]) -> str:
        return _each_job_dir(
            scheduler_ids,
            '[ -f "$d/exit_code" ] && continue; '
            'if [ -f "$d/job.pid" ]; then p=$(cat "$d/runner.pid"); '
            # PID 1 reaps orphans late here: a dead runner can linger as a zombie, so check its state.
            'if [ -e "/proc/$p" ] && ! grep -q "^State:.*Z" "/proc/$p/status" 2>/dev/null; then echo "$d|running"; fi; '
            'elif [ -d "$d" ]; then echo "$d|pending"; fi; ',
        )

    def parse_statuses(self, result: CommandResult, scheduler_ids: Sequence[str]) -> dict[str, JobStatus]:
        statuses = {}
        for line in self.checked(result, "local status query").splitlines():
            job_id, _, state = line.partition("|")
            statuses[job_id] = JobStatus(job_id, State(state))
        return statuses

    def records_command(self, scheduler_ids: Sequence[str]) -> str:
        return _each_job_dir(
            scheduler_ids,
            '[ -f "$d/exit_code" ] || continue; '
            'c=0; [ -f "$d/cancelled" ] && c=1; '
            'echo "$d|$(cat "$d/exit_code")|$(cat "$d/started" 2>/dev/null)|$(cat "$d/ended" 2>/dev/null)|'
            '$c|$(cat "$d/walltime" 2>/dev/null)"; ',
        )

    def parse_records(self, result: CommandResult, scheduler_ids: Sequence[str]) -> dict[str, JobRecord]:
        return parse_runner_records(self.checked(result, "local accounting query"))

    def cancel_command(self, scheduler_id: str) -> str:
        d = shlex.quote(scheduler_id)
        return (
            f"[ -d {d} ] || exit 0; touch {d}/cancelled; "
            # The runner may not have started the job yet: give it a moment to write job.pid.
            f"for i in 1 2 3 4 5 6 7 8 9 10; do [ -f {d}/job.pid ] || [ -f {d}/exit_code ] && break; sleep 0.2; done; "
            f"[ -f {d}/job.pid ] && kill -TERM -- -$(cat {d}/job.pid) 2>/dev/null; true"
        )

    def load_command(self, queues: Sequence[str]) -> str | None:
        # No queue: a job starts when it is submitted. What runs is a job directory with a pid and no exit code.
        return ('n=0; for p in $(find . -maxdepth 4 -name job.pid 2>/dev/null); do '
                '[ -f "$(dirname "$p")/exit_code" ] || n=$((n+1)); done; echo "$n"')

    def parse_load(self, result: CommandResult) -> Load:
        running = self.checked(result, "local load query").strip()
        return Load(pending=0, running=int(running) if running.isdigit() else None)


def job_python(settings: Mapping[str, object] | None = None) -> str:
    """The Python local jobs run with: the cluster's `python` option, else the portal's own (`make run`'s .venv)."""
    return str((settings or {}).get("python") or sys.executable)


def missing_on_host(modules: Sequence[str], launcher: str = "", settings: Mapping[str, object] | None = None) -> list[str]:
    """What a local job would not find, so that it is refused before it runs rather than failing with exit 127: the
    launcher command (torchrun, mpirun) on the jobs' PATH, then each module (torch) as the jobs' Python imports it."""
    python = job_python(settings)
    missing = []
    if launcher and launcher != "script":
        path = os.pathsep.join([os.path.dirname(python), os.environ.get("PATH", os.defpath)])
        if shutil.which(launcher, path=path) is None:
            missing.append(launcher)
    if modules:
        # Asked again at most every 10 s: `make torch` while the portal runs shows without a restart.
        missing += _modules_missing(python, tuple(modules), int(time.monotonic() // 10))
    return missing


@functools.lru_cache(maxsize=32)
def _modules_missing(python: str, modules: tuple[str, ...], _period: int) -> list[str]:
    # find_spec only: nothing is imported (torch takes seconds to import).
    probe = "import importlib.util as u, sys; print(' '.join(m for m in sys.argv[1:] if u.find_spec(m) is None))"
    try:
        done = subprocess.run([python, "-c", probe, *modules], capture_output=True, text=True, timeout=30,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return list(modules)
    return done.stdout.split() if done.returncode == 0 else list(modules)


def _each_job_dir(job_ids: Sequence[str], body: str) -> str:
    """A shell loop running `body` with $d set to each job's directory (a job's id is its directory)."""
    return f"for d in {' '.join(shlex.quote(i) for i in job_ids)}; do {body}done"


def parse_runner_records(stdout: str) -> dict[str, JobRecord]:
    """What the runner recorded of finished jobs: `dir|exit code|started|ended|cancelled|walltime` a line."""
    records = {}
    for line in stdout.splitlines():
        job_id, rc, started, ended, cancelled, walltime = line.split("|")
        exit_code = int(rc)
        start = datetime.fromtimestamp(int(started), UTC) if started else None
        end = datetime.fromtimestamp(int(ended), UTC) if ended else None
        elapsed = int(ended) - int(started) if started and ended else None
        limit = int(walltime.rstrip("s")) if walltime else None
        if cancelled == "1":
            state, reason = State.CANCELLED, "cancelled"
        elif exit_code in _TIMEOUT_CODES and limit and elapsed is not None and elapsed >= limit - 1:
            state, reason = State.TIMED_OUT, f"walltime of {limit} s exceeded"
        elif exit_code == 0:
            state, reason = State.COMPLETED, ""
        else:
            state, reason = State.FAILED, f"exit code {exit_code}"
        records[job_id] = JobRecord(job_id, state, exit_code, start, end, elapsed, 1, reason, {"exit_code": rc})
    return records
