"""Torque (settings {"dialect": "torque"}): `#PBS -l nodes=N:ppn=P[:gpus=G]`, the group as an account (`-A`),
`-o/-e` on the qsub command line (the slurm-wlm-torque wrappers ignore them in the script).

`qstat -f` shows a finished job as `C`, and on the wrappers without any exit status; a real pbs_server forgets
completed jobs after `keep_completed`: the job's own exit file (backends/pbs_base.py) then decides. Tested on the
real wrappers of the test cluster and on recorded pbs_server output.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import datetime

from backends.base import SCRIPT_FILE, STDERR_FILE, STDOUT_FILE, JobSpec, State
from backends.pbs_base import PBSBase, _checked
from backends.pbs_parse import (
    IndexEntry,
    Observation,
    _elapsed,
    _exit_code,
    _exit_reason,
    _int,
    _raw,
    _signal_reason,
    _walltime_reason,
    parse_duration,
    parse_time,
)
from backends.script import hms

# A Torque node property ("a100", "bigmem"): one word of the nodes spec.
_PROPERTY_RE = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,63}")

# What pbs_server (or Moab) writes into `comment` of every job it starts: a note, never why the job ended.
_ROUTINE_COMMENT = re.compile(r"Job started on ")
_TORQUE_PENDING = {"Q": "queued", "H": "held", "W": "waiting for its start time", "T": "being moved"}
_TORQUE_RUNNING = {"R": "", "E": "exiting", "S": "suspended"}

# Torque 6 (jobExitStatus in the admin guide): -11 walltime, -10 memory (in Torque 4: any limit), -12 CPU time.
_TORQUE_EXEC_WALLTIME = -11
_TORQUE_EXEC_CODES = {
    -1: "could not be started (JOB_EXEC_FAIL1)",
    -2: "could not be started after its files were staged (JOB_EXEC_FAIL2)",
    -3: "failed to start and will be retried (JOB_EXEC_RETRY)",
    -8: "could not execute its command (JOB_EXEC_CMDFAIL)",
    -9: "could not open its stdout/stderr files (JOB_EXEC_STDOUTFAIL)",
    -10: "exceeded a resource limit (JOB_EXEC_OVERLIMIT)",
    -11: "exceeded its walltime (JOB_EXEC_OVERLIMIT_WT)",
    -12: "exceeded its CPU time limit (JOB_EXEC_OVERLIMIT_CPUT)",
}


_ATTRIBUTE_RE = re.compile(r"^\s+([A-Za-z_][A-Za-z0-9_.]*) = (.*)$")


def parse_qstat_text(text: str) -> dict[str, dict[str, str]]:
    """Plain `qstat -f`: "Job Id: ID" then indented "key = value" lines. A real pbs_server wraps long values
    onto tab-indented continuation lines, cut anywhere (even mid-word), so they are joined back as they are."""
    jobs: dict[str, dict[str, str]] = {}
    current: dict[str, str] | None = None
    last_key = ""
    for line in text.splitlines():
        if line.startswith("Job Id:"):
            current = jobs.setdefault(line.split(":", 1)[1].strip(), {})
            last_key = ""
            continue
        if current is None or not line.strip():
            continue
        match = _ATTRIBUTE_RE.match(line)
        if match:
            last_key = match.group(1)
            current[last_key] = match.group(2)
        elif last_key:
            current[last_key] += line.lstrip("\t ")
    return jobs


def _torque_times(a: Mapping[str, str], final: bool) -> tuple[datetime | None, datetime | None]:
    """A real pbs_server prints start_time and comp_time (ctime/mtime are creation and last change); the
    slurm-wlm-torque qstat prints neither, nor etime, and puts the start in mtime and the end in ctime."""
    if "start_time" in a or "comp_time" in a or "etime" in a:
        started = parse_time(a.get("start_time"))
        ended = parse_time(a.get("comp_time")) or (parse_time(a.get("mtime")) if final else None)
        return started, ended
    started = parse_time(a.get("mtime")) if "exec_host" in a else None
    return started, parse_time(a.get("ctime")) if final else None


def judge_torque(
    job_id: str, a: Mapping[str, str], entry: IndexEntry | None, now: datetime | None, grace_seconds: int
) -> Observation:
    code = a.get("job_state", "").strip()
    nodes = _int(a.get("Resource_List.nodect"))
    raw = _raw(a, entry)
    if code in _TORQUE_PENDING:
        return Observation(job_id, State.PENDING, reason=a.get("comment") or _TORQUE_PENDING[code], nodes=nodes,
                           raw=raw)
    final = code == "C"
    started, ended = _torque_times(a, final)
    if not final:
        return Observation(job_id, State.RUNNING, reason=_TORQUE_RUNNING.get(code, f"state {code}"),
                           started_at=started, nodes=nodes, raw=raw)
    used = parse_duration(a.get("resources_used.walltime"))
    elapsed = _elapsed(used, started, ended)
    limit = parse_duration(a.get("Resource_List.walltime"))
    state, exit_code, reason = _torque_outcome(a, entry, elapsed, limit)
    if state is None:
        if now is not None and ended is not None and (now - ended).total_seconds() < grace_seconds:
            # The file may still be on its way (NFS attribute caching on the login node): look again shortly.
            return Observation(job_id, State.RUNNING, reason="ended; waiting for its exit status",
                               started_at=started, nodes=nodes, raw=raw)
        state, reason = State.FAILED, (
            "ended without recording an exit status: killed by a signal, deleted outside Kakehashi, "
            "or its node failed"
        )
    comment = a.get("comment", "").strip()
    if comment and state != State.COMPLETED and not _ROUTINE_COMMENT.match(comment):
        # pbs_server says why it ended a job itself ("deleted because its dependency ... can never be satisfied").
        # A job that did its work needs no explanation, and "Job started on ..." is no reason for anything.
        reason = f"{reason} ({comment})" if reason else comment
    return Observation(job_id, state, reason=reason, exit_code=exit_code, started_at=started, ended_at=ended,
                       elapsed_seconds=elapsed, nodes=nodes, raw=raw)


def _torque_outcome(
    a: Mapping[str, str], entry: IndexEntry | None, elapsed: int | None, limit: int | None
) -> tuple[State | None, int | None, str]:
    """A `C` job. A real pbs_server may say exit_status; the wrappers never do, and then the job's own file
    decides. State None: nothing is known yet (the caller waits for the file, then calls it a failure)."""
    ran = "exec_host" in a
    # Times are whole seconds from both ends: one second short of the limit is still the limit.
    timed_out = limit is not None and elapsed is not None and elapsed >= limit - 1
    cancel_asked = entry is not None and entry.cancel_requested
    status = _int(a.get("exit_status", a.get("Exit_status")))
    said_by_torque = status is not None
    if status is None and entry is not None:
        status = entry.exit_status
    if status is not None:
        # A killed script may still write 128+signal into its file on the way out (seen on the walltime kill of
        # the test cluster), so a status that looks like a kill does not outweigh the walltime or a cancel.
        killed = status < 0 or status > 128
        if (said_by_torque and status == _TORQUE_EXEC_WALLTIME) or (killed and timed_out):
            return State.TIMED_OUT, None if status < 0 else _exit_code(status), _walltime_reason(elapsed, limit)
        if killed and cancel_asked:
            return State.CANCELLED, None if status < 0 else _exit_code(status), "cancelled (qdel)"
        if status < 0:
            return State.FAILED, None, f"the job {_TORQUE_EXEC_CODES.get(status, f'was ended by Torque ({status})')}"
        if status >= 256:
            return State.FAILED, _exit_code(status), _signal_reason(status)
        return (State.COMPLETED, 0, "") if status == 0 else (State.FAILED, status, _exit_reason(status))
    if not ran:
        return State.CANCELLED, None, "deleted from the queue before it started"
    if timed_out:
        return State.TIMED_OUT, None, _walltime_reason(elapsed, limit)
    if cancel_asked:
        return State.CANCELLED, None, "cancelled (qdel) while running"
    return None, None, ""


class TorqueBackend(PBSBase):
    flavour = "torque"
    default_account_option = "-A"
    qstat = "qstat -f"
    parse_qstat = staticmethod(parse_qstat_text)

    def resource_directives(self, spec: JobSpec, mapping: Mapping[str, str]) -> list[str]:
        res = spec.resources
        ppn = self._cpus(spec)
        nodes = f"{res.nodes}:ppn={ppn}"
        if prop := mapping.get("property"):
            nodes += f":{_checked('node property', prop, _PROPERTY_RE)}"
        if res.gpus_per_node:
            nodes += f":gpus={res.gpus_per_node}"
        lines = [f"-l nodes={nodes}", f"-l walltime={hms(spec.walltime_seconds)}"]
        if res.memory_gb:
            # Torque's mem is for the whole job and only honoured on one node; pmem is per process.
            if res.nodes == 1:
                lines.append(f"-l mem={res.memory_gb}gb")
            else:
                lines.append(f"-l pmem={math.ceil(res.memory_gb * 1024 / ppn)}mb")
        return lines

    def submit_command(self, spec: JobSpec | None = None) -> list[str]:
        # The slurm-wlm-torque qsub passes its own -o/-e to sbatch, so script lines would lose; real Torque
        # resolves a relative path against the submit directory, which is the job directory.
        return ["qsub", "-o", STDOUT_FILE, "-e", STDERR_FILE, SCRIPT_FILE]

    def find_lookup(self, quoted_name: str) -> str:
        # Torque's qselect is missing from the wrappers and the short qstat cuts names at 16 characters.
        return (
            f"qstat -f 2>/dev/null | awk -v n={quoted_name} "
            "'/^Job Id:/ {id = $3} $1 == \"Job_Name\" && $3 == n {print id}'"
        )

    def judge(self, job_id: str, attributes: Mapping[str, str], entry: IndexEntry | None,
              now: datetime | None) -> Observation:
        return judge_torque(job_id, attributes, entry, now, self.grace_seconds)
