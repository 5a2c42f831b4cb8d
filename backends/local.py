"""The local backend: jobs run as subprocesses on the host the transport reaches, one directory per job.

No scheduler: a small runner script plays its part (walltime via `timeout`, an exit-code file as
accounting). It is what `make run` uses, and it behaves like the HPC backends so the portal needs no special
case: statuses() reports queued/running jobs, final_records() reports finished ones.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from datetime import UTC, datetime

from backends.base import (
    Backend,
    BackendError,
    JobRecord,
    JobSpec,
    JobStatus,
    State,
    SubmitRefused,
)
from backends.safety import check_path, validate_spec
from backends.script import Dialect, assemble, recorded_id_command, render_body, staged_command, staging_archive

RUNNER = """#!/bin/bash
# Kakehashi local runner: runs job.sh under a walltime and records what a scheduler's accounting would.
cd "$(dirname "$0")" || exit 1
echo "$$" > runner.pid
echo "$1" > walltime
date +%s > started
if [ -f cancelled ]; then echo 143 > exit_code.tmp; mv exit_code.tmp exit_code; date +%s > ended; exit 0; fi
export KAKEHASHI_LOCAL_JOB_ID="$$"
timeout --kill-after=10 "$1" bash job.sh > stdout.log 2> stderr.log < /dev/null &
echo "$!" > job.pid
wait "$!"
rc=$?
date +%s > ended
echo "$rc" > exit_code.tmp && mv exit_code.tmp exit_code
"""

_TIMEOUT_CODES = {124, 137}


class LocalBackend(Backend):
    kind = "local"
    dialect = Dialect(hosts_command="hostname", job_id_var="KAKEHASHI_LOCAL_JOB_ID")

    def directives(self, spec: JobSpec) -> list[str]:
        return []

    def render(self, spec: JobSpec) -> str:
        validate_spec(spec)
        return assemble("#!/bin/bash", [], render_body(spec, self.dialect))

    def _job_id(self, spec: JobSpec) -> str:
        return check_path(spec.workdir or spec.name, what="job directory")

    def submit_command(self, spec: JobSpec) -> list[str]:
        return ["setsid", "bash", "run.sh", f"{int(spec.walltime_seconds)}s"]

    def submit(self, spec: JobSpec, script: str | None = None) -> str:
        script = script if script is not None else self.render(spec)
        job_id = self._job_id(spec)
        staged = JobSpec(**{**spec.__dict__, "files": {**spec.files, "run.sh": RUNNER.encode()}})
        launch = f"{shlex.join(self.submit_command(spec))} < /dev/null > /dev/null 2>&1 & echo {shlex.quote(job_id)}"
        result = self.transport.run_shell(
            staged_command(job_id, launch), stdin=staging_archive(staged, script), timeout=60
        )
        if not result.ok:
            raise SubmitRefused(f"the local runner could not start the job: {result.message}")
        return result.stdout.strip().splitlines()[-1]

    def find(self, spec: JobSpec) -> str | None:
        result = self.transport.run_shell(recorded_id_command(self._job_id(spec)))
        recorded = result.stdout.strip()
        return recorded or None

    def statuses(self, scheduler_ids: Sequence[str]) -> dict[str, JobStatus]:
        if not scheduler_ids:
            return {}
        ids = " ".join(shlex.quote(check_path(i, what="job id")) for i in scheduler_ids)
        command = (
            f"for d in {ids}; do "
            '[ -f "$d/exit_code" ] && continue; '
            'if [ -f "$d/job.pid" ]; then p=$(cat "$d/runner.pid"); '
            # PID 1 reaps orphans late here: a dead runner can linger as a zombie, so check its state.
            'if [ -e "/proc/$p" ] && ! grep -q "^State:.*Z" "/proc/$p/status" 2>/dev/null; then echo "$d|running"; fi; '
            'elif [ -d "$d" ]; then echo "$d|pending"; fi; '
            "done"
        )
        result = self.transport.run_shell(command)
        if not result.ok:
            raise BackendError(f"local status query failed: {result.message}")
        statuses = {}
        for line in result.stdout.splitlines():
            job_id, _, state = line.partition("|")
            statuses[job_id] = JobStatus(job_id, State(state))
        return statuses

    def final_records(self, scheduler_ids: Sequence[str]) -> dict[str, JobRecord]:
        if not scheduler_ids:
            return {}
        ids = " ".join(shlex.quote(check_path(i, what="job id")) for i in scheduler_ids)
        command = (
            f"for d in {ids}; do "
            '[ -f "$d/exit_code" ] || continue; '
            'c=0; [ -f "$d/cancelled" ] && c=1; '
            'echo "$d|$(cat "$d/exit_code")|$(cat "$d/started" 2>/dev/null)|$(cat "$d/ended" 2>/dev/null)|'
            '$c|$(cat "$d/walltime" 2>/dev/null)"; '
            "done"
        )
        result = self.transport.run_shell(command)
        if not result.ok:
            raise BackendError(f"local accounting query failed: {result.message}")
        records = {}
        for line in result.stdout.splitlines():
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
            records[job_id] = JobRecord(
                job_id, state, exit_code, start, end, elapsed, 1, reason, {"exit_code": rc}
            )
        return records

    def cancel(self, scheduler_id: str) -> None:
        d = shlex.quote(check_path(scheduler_id, what="job id"))
        command = (
            f"[ -d {d} ] || exit 0; touch {d}/cancelled; "
            # The runner may not have started the job yet: give it a moment to write job.pid.
            f"for i in 1 2 3 4 5 6 7 8 9 10; do [ -f {d}/job.pid ] || [ -f {d}/exit_code ] && break; sleep 0.2; done; "
            f"[ -f {d}/job.pid ] && kill -TERM -- -$(cat {d}/job.pid) 2>/dev/null; true"
        )
        result = self.transport.run_shell(command)
        if not result.ok:
            raise BackendError(f"local cancel failed: {result.message}")
