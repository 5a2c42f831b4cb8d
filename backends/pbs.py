"""PBS: PBS Professional / OpenPBS (dialect "pbspro", the default) and Torque (dialect "torque").

Both dialects share the submit path, the job-directory index and the way a finished job is judged; they differ
in the directives and in what `qstat` can tell about a finished job:

- PBS Pro / OpenPBS: `#PBS -l select=N:ncpus=C:ngpus=G:mem=Mgb[:mpiprocs=P]`, the group as a project (`-P`, or
  `-A` with settings {"account_option": "-A"}), `-o/-e` as directives (PBS Pro honours them), `-k oed` so the
  output is written in place while the job runs (settings {"direct_write": False} turns it off), `-J` arrays.
  One `qstat -f -F json -x ID...` gives queue state and, from the job history, `Exit_status`, `substate`
  and `comment` of finished jobs (see `_pbspro_outcome` for what they mean).
- Torque: `#PBS -l nodes=N:ppn=P[:gpus=G]`, `-A` account, `-t` arrays, `-o/-e` on the qsub command line (the
  slurm-wlm-torque wrappers ignore them in the script). `qstat -f` shows a finished job as `C`, and on the
  wrappers without any exit status; a real pbs_server forgets completed jobs after `keep_completed`.

The exit status the scheduler may not keep is kept by the job itself: every script writes
`kakehashi-exit-status` into its job directory (backends/script.py), and the submit command links the job
directory under the scheduler's id in an index on the login node (`~/.kakehashi/pbs-jobs/<id>`). So one shell
command answers for many jobs: `qstat` for all of them, then the exit file of each. A job killed by the
scheduler (qdel, walltime) never writes the file; it is told apart by what is known for certain: it never
started (deleted from the queue), it ran for its whole walltime (timed out), Kakehashi asked to cancel it
(`cancel()` leaves a marker beside the exit file), or else it failed without an exit code. The elements of an
array share one directory, so arrays are not indexed: PBS Pro reports an array as a whole (its Exit_status 0/1/2);
on the Torque wrappers the id qsub prints is one element of the Slurm array underneath.

Times are printed with ctime() in the login node's zone: every query runs under TZ=UTC0, so they are UTC.
"""

from __future__ import annotations

import json
import math
import re
import shlex
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from backends.base import (
    SCRIPT_FILE,
    STDERR_FILE,
    STDOUT_FILE,
    Backend,
    BackendError,
    InvalidJobSpec,
    JobRecord,
    JobSpec,
    JobStatus,
    Launcher,
    State,
    SubmitRefused,
)
from backends.safety import check_job_name, check_mapping, check_path, validate_spec
from backends.script import Dialect, assemble, hms, recorded_id_command, render_body, staged_command, staging_archive

DIALECTS = ("pbspro", "torque")
EXIT_FILE = "kakehashi-exit-status"
CANCEL_FILE = "kakehashi-cancel-requested"
DEFAULT_INDEX_DIR = ".kakehashi/pbs-jobs"
INDEX_KEEP_DAYS = 60

# "36" (slurm-wlm-torque), "1234.server" (PBS Pro, Torque), "1234[].server" (array), "1234[7].server" (subjob).
_ID_RE = re.compile(r"^\d+(\[\d*\])?(\.[A-Za-z0-9][A-Za-z0-9._-]*)?$")
# A PBS destination: queue, or queue@server.
_QUEUE_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}(@[A-Za-z0-9][A-Za-z0-9_.-]{0,127})?")
# Extra chunk resources for PBS Pro's select ("gpu_model=a100:host_type=dgx"): no "," or "+", which would start
# another resource or another chunk.
_CHUNK_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=[A-Za-z0-9_.-]+(:[A-Za-z_][A-Za-z0-9_]*=[A-Za-z0-9_.-]+)*")
_PLACE_RE = re.compile(r"[a-z]+(:[a-z]+){0,3}")
# A Torque node property ("a100", "bigmem"): one word of the nodes spec.
_PROPERTY_RE = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,63}")

# Failures that may pass by themselves: never shown to a researcher as a refusal of their job.
_TRANSIENT_RE = re.compile(
    r"cannot connect to server|connection refused|no route to host|errno=15010|communication failure"
    r"|timed out|temporarily unavailable|try again|server shutting down|premature end of message"
    r"|unable to contact slurm controller|socket timed out|problem loading jobs",
    re.IGNORECASE,
)
# What qdel says about a job that is already gone (the wrappers say nothing at all).
_GONE_RE = re.compile(
    r"Unknown Job Id|Job has finished|Invalid state|Request invalid for state of job|already (completed|finished)",
    re.IGNORECASE,
)
# What qstat says about ids it does not (or no longer) know; anything else on stderr is a failure.
_UNKNOWN_RE = re.compile(r"Unknown Job Id|Job has finished", re.IGNORECASE)
_WRAPPER_FAILURE = "There was an error running the Slurm sbatch command"

# PBS Pro / OpenPBS job_state letters (qstat(1B)); F and X are finished jobs and subjobs in the history.
_PBSPRO_PENDING = {"Q": "queued", "H": "held", "W": "waiting for its start time", "T": "being moved",
                   "M": "moved to another server"}
_PBSPRO_RUNNING = {"R": "", "E": "exiting", "B": "array running", "S": "suspended", "U": "suspended (workstation busy)"}
_PBSPRO_FINAL = {"F", "X"}
_TORQUE_PENDING = {"Q": "queued", "H": "held", "W": "waiting for its start time", "T": "being moved"}
_TORQUE_RUNNING = {"R": "", "E": "exiting", "S": "suspended"}

# OpenPBS src/include/job.h. PBS Pro substates of a finished job (OGSA-BES): terminated by qdel, finished, failed.
_SUBSTATE_TERMINATED = 91
_JOB_EXEC_KILL_WALLTIME = -29
_PBSPRO_EXEC_CODES = {
    -1: "could not be started (JOB_EXEC_FAIL1)",
    -2: "could not be started after its files were staged (JOB_EXEC_FAIL2)",
    -3: "failed to start and will be retried (JOB_EXEC_RETRY)",
    -4: "aborted on MoM initialisation (JOB_EXEC_INITABT)",
    -10: "has an invalid uid/gid on the execution host (JOB_EXEC_FAILUID)",
    -11: "was requeued (JOB_EXEC_RERUN)",
    -16: "was rejected by a site hook (JOB_EXEC_FAILHOOK_RERUN)",
    -17: "was rejected by a site hook (JOB_EXEC_FAILHOOK_DELETE)",
    -19: "was deleted by a site hook (JOB_EXEC_HOOK_DELETE)",
    -20: "lost its mother superior node (JOB_EXEC_RERUN_MS_FAIL)",
    -22: "failed in a site hook (JOB_EXEC_HOOKERROR)",
    -24: "exceeded its CPUs, burst (JOB_EXEC_KILL_NCPUS_BURST)",
    -25: "exceeded its CPUs, sum (JOB_EXEC_KILL_NCPUS_SUM)",
    -26: "exceeded its virtual memory limit (JOB_EXEC_KILL_VMEM)",
    -27: "exceeded its memory limit (JOB_EXEC_KILL_MEM)",
    -28: "exceeded its CPU time limit (JOB_EXEC_KILL_CPUT)",
    -29: "exceeded its walltime (JOB_EXEC_KILL_WALLTIME)",
    -31: "exceeded its high-bandwidth memory limit (JOB_EXEC_KILL_HPMEM)",
}
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

_MARK = "#kakehashi-"
_TRAILER_RC = re.compile(r"^#kakehashi-qstat-rc (\d+)$", re.MULTILINE)


def _check_ids(ids: Sequence[str]) -> list[str]:
    bad = [i for i in ids if not isinstance(i, str) or not _ID_RE.match(i)]
    if bad:
        raise BackendError(f"not PBS job ids: {bad!r}")
    return list(ids)


def _checked(kind: str, value: str, pattern: re.Pattern[str]) -> str:
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise InvalidJobSpec(f"{kind} {value!r} is not allowed in a PBS directive")
    return value


def _sequence(job_id: str) -> str:
    """`1234[].server` -> `1234[]`: what qsub and qstat agree on when they spell the server differently."""
    return job_id.split(".", 1)[0]


# ---------------------------------------------------------------------------------------------- small parsers


def parse_time(value: str | None) -> datetime | None:
    """A ctime() string ("Thu May  8 08:42:45 2025") printed under TZ=UTC0, or epoch seconds; None if neither."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return datetime.fromtimestamp(int(value), UTC) if int(value) else None
    try:
        return datetime.strptime(" ".join(value.split()), "%a %b %d %H:%M:%S %Y").replace(tzinfo=UTC)
    except ValueError:
        return None


def parse_duration(value: str | None) -> int | None:
    """[[H:]M:]S with any number of hours ("06:01:24", "1234:00:00"), or plain seconds; None if not a duration."""
    if value is None:
        return None
    parts = str(value).strip().split(":")
    if not parts or len(parts) > 3:
        return None
    try:
        numbers = [float(p) for p in parts]
    except ValueError:
        return None
    seconds = 0.0
    for number in numbers:
        seconds = seconds * 60 + number
    return int(seconds)


def _int(value: object) -> int | None:
    # PBS Pro prints some numbers as strings ("Exit_status":"-29"): accept both.
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return None


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def parse_qstat_json(text: str) -> dict[str, dict[str, str]]:
    """`qstat -f -F json` as {job id: {attribute: value}}, nested resources flattened ("Resource_List.walltime")
    the way plain `qstat -f` spells them. Variable_List (the job's environment) is left out on purpose."""
    if not text.strip():
        return {}
    try:
        document = json.loads(text, strict=False)
    except ValueError:
        # Older PBS Pro releases print environment values unescaped; the environment is not needed here.
        cleaned = re.sub(r'"Variable_List"\s*:\s*\{[^{}]*\}\s*,?', "", text)
        try:
            document = json.loads(cleaned, strict=False)
        except ValueError as exc:
            raise BackendError(f"qstat printed JSON that does not parse ({exc}): {text[:300]!r}") from None
    if not isinstance(document, dict):
        raise BackendError(f"qstat printed unexpected JSON: {text[:300]!r}")
    jobs = document.get("Jobs") or {}
    result: dict[str, dict[str, str]] = {}
    for job_id, attributes in jobs.items():
        if not isinstance(attributes, dict):
            continue
        flat: dict[str, str] = {}
        for key, value in attributes.items():
            if key == "Variable_List" or value is None:
                continue
            if isinstance(value, dict):
                for sub, sub_value in value.items():
                    if sub_value is not None:
                        flat[f"{key}.{sub}"] = str(sub_value)
            else:
                flat[key] = str(value)
        result[str(job_id)] = flat
    return result


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


# ------------------------------------------------------------------------------------- the job-directory index


@dataclass(frozen=True)
class IndexEntry:
    """What the job directory of one job says: its own exit status, when it was written, a cancel request."""

    exit_status: int | None = None
    exit_written_at: datetime | None = None
    cancel_requested: bool = False


def parse_trailer(text: str) -> tuple[int | None, datetime | None, dict[str, IndexEntry]]:
    """The lines the query command prints after qstat: qstat's exit code, the login node's clock, the index."""
    rc: int | None = None
    now: datetime | None = None
    entries: dict[str, IndexEntry] = {}
    for line in text.splitlines():
        if not line.startswith(_MARK):
            continue
        parts = line.split()
        if parts[0] == "#kakehashi-qstat-rc" and len(parts) == 2:
            rc = _int(parts[1])
        elif parts[0] == "#kakehashi-now" and len(parts) == 2:
            now = parse_time(parts[1])
        elif parts[0] == "#kakehashi-job" and len(parts) == 5:
            _, job_id, status, written, cancel = parts
            entries[job_id] = IndexEntry(
                exit_status=_int(status) if status != "-" else None,
                exit_written_at=parse_time(written) if written != "-" else None,
                cancel_requested=cancel == "1",
            )
    return rc, now, entries


# ------------------------------------------------------------------------------------------- judging one job


@dataclass(frozen=True)
class Observation:
    """One job as the query saw it. `listed` is False when only the job directory still knows it."""

    scheduler_id: str
    state: State
    listed: bool = True
    reason: str = ""
    exit_code: int | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    elapsed_seconds: int | None = None
    nodes: int | None = None
    raw: Mapping[str, str] = field(default_factory=dict)

    def status(self) -> JobStatus:
        return JobStatus(self.scheduler_id, self.state, self.reason, self.exit_code)

    def record(self) -> JobRecord:
        return JobRecord(
            scheduler_id=self.scheduler_id,
            state=self.state,
            exit_code=self.exit_code,
            started_at=self.started_at,
            ended_at=self.ended_at,
            elapsed_seconds=self.elapsed_seconds,
            nodes=self.nodes,
            reason=self.reason,
            raw=dict(self.raw),
        )


def _raw(attributes: Mapping[str, str], entry: IndexEntry | None) -> dict[str, str]:
    raw = dict(attributes)
    if entry is not None:
        raw["kakehashi_exit_status"] = "" if entry.exit_status is None else str(entry.exit_status)
        raw["kakehashi_cancel_requested"] = "1" if entry.cancel_requested else "0"
    return raw


def _elapsed(used: int | None, started: datetime | None, ended: datetime | None) -> int | None:
    if used is not None:
        return used
    if started and ended:
        return max(int((ended - started).total_seconds()), 0)
    return None


def _exit_code(status: int) -> int:
    """The shell's convention for a status PBS reports as 256+signal (OpenPBS mom_start.c: WTERMSIG + 0x100)."""
    return 128 + (status - 256) if status >= 256 else status


def _signal_reason(status: int) -> str:
    number = status - 256
    return f"killed by signal {number} ({_signal_name(number)})"


def _exit_reason(status: int) -> str:
    if 128 < status < 128 + 65:
        return f"exit code {status} ({_signal_name(status - 128)})"
    return f"exit code {status}"


def _walltime_reason(used: int | None, limit: int | None) -> str:
    if used is not None and limit is not None:
        return f"walltime exceeded ({hms(used)} used of {hms(limit)})"
    return "walltime exceeded"


def judge_pbspro(job_id: str, a: Mapping[str, str], entry: IndexEntry | None) -> Observation:
    code = a.get("job_state", "").strip()
    comment = a.get("comment", "")
    nodes = _int(a.get("Resource_List.nodect"))
    started = parse_time(a.get("stime"))
    raw = _raw(a, entry)
    if code in _PBSPRO_PENDING:
        reason = comment or _PBSPRO_PENDING[code]
        if code == "H" and "held" not in reason.lower():
            reason = f"held: {reason}"
        return Observation(job_id, State.PENDING, reason=reason, nodes=nodes, raw=raw)
    if code not in _PBSPRO_FINAL:
        return Observation(job_id, State.RUNNING, reason=_PBSPRO_RUNNING.get(code, f"state {code}"),
                           started_at=started, nodes=nodes, raw=raw)
    ended = parse_time(a.get("obittime")) or parse_time(a.get("mtime"))
    used = parse_duration(a.get("resources_used.walltime"))
    state, exit_code, reason = _pbspro_outcome(a, entry, started, used)
    return Observation(job_id, state, reason=reason, exit_code=exit_code, started_at=started, ended_at=ended,
                       elapsed_seconds=_elapsed(used, started, ended), nodes=nodes, raw=raw)


def _pbspro_outcome(
    a: Mapping[str, str], entry: IndexEntry | None, started: datetime | None, used: int | None
) -> tuple[State, int | None, str]:
    """A finished PBS Pro job. Exit_status: 0-255 the script's own; 256+N killed by signal N; negative a
    JOB_EXEC_* code (-29 since OpenPBS 20: killed for its walltime). Substate 91 means deleted (qdel); the comment
    ends "and finished", "and failed", "and exceeded resource walltime" or "and terminated [by user@host]"."""
    comment = a.get("comment", "")
    status = _int(a.get("Exit_status"))
    limit = parse_duration(a.get("Resource_List.walltime"))
    terminated = _int(a.get("substate")) == _SUBSTATE_TERMINATED or " and terminated" in comment
    cancel_asked = entry is not None and entry.cancel_requested
    code = None if status is None or status < 0 else _exit_code(status)
    if terminated:
        who = comment.rsplit(" and terminated by ", 1)[1] if " and terminated by " in comment else ""
        where = "while running" if started else "before it started"
        return State.CANCELLED, code, f"deleted (qdel{' by ' + who if who else ''}) {where}"
    if status == _JOB_EXEC_KILL_WALLTIME or "exceeded resource walltime" in comment:
        return State.TIMED_OUT, None, _walltime_reason(used, limit)
    if status is None:
        if started is None:
            return State.CANCELLED, None, "left the queue without running"
        return State.FAILED, None, comment or "finished without an exit status"
    if a.get("array", "").lower() == "true":
        # An array's own Exit_status sums up its subjobs: 0 all exited 0, 1 one exited non-zero, 2 one was
        # ended by PBS (OpenPBS array_func.c).
        if status == 0:
            return State.COMPLETED, 0, ""
        what = "was ended by PBS" if status == 2 else "exited non-zero"
        return State.FAILED, None, f"at least one subjob {what} ({a.get('array_state_count', '').strip()})"
    if status > 128:
        # Before OpenPBS 20 a walltime kill was only a SIGTERM/SIGKILL, seen as 256+signal (or 128+signal when
        # the top shell outlived its child).
        if limit is not None and used is not None and used >= limit:
            return State.TIMED_OUT, code, _walltime_reason(used, limit)
        if cancel_asked:
            return State.CANCELLED, code, "cancelled (qdel)"
        if status >= 256:
            return State.FAILED, code, _signal_reason(status)
    if status < 0:
        what = _PBSPRO_EXEC_CODES.get(status, f"was ended by PBS (exit status {status})")
        return State.FAILED, None, f"the job {what}"
    if status == 0:
        return State.COMPLETED, 0, ""
    return State.FAILED, status, _exit_reason(status)


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
    if comment := a.get("comment", "").strip():
        # pbs_server says why it ended a job itself ("deleted because its dependency ... can never be satisfied").
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


def judge_unlisted(job_id: str, entry: IndexEntry) -> Observation | None:
    """A job qstat no longer lists (Torque keep_completed, PBS Pro without job history): only its directory."""
    if entry.exit_status is not None:
        status = entry.exit_status
        state = State.COMPLETED if status == 0 else State.FAILED
        reason = "" if status == 0 else _exit_reason(status)
        return Observation(job_id, state, listed=False, reason=reason, exit_code=status,
                           ended_at=entry.exit_written_at, raw=_raw({}, entry))
    if entry.cancel_requested:
        return Observation(job_id, State.CANCELLED, listed=False, reason="cancelled (qdel); the scheduler keeps no record",
                           raw=_raw({}, entry))
    return None


# ------------------------------------------------------------------------------------------------- backend


class PBSBackend(Backend):
    kind = "pbs"
    directive_prefix = "#PBS"
    dialect = Dialect(
        # One line per CPU (Torque) or MPI process (PBS Pro); render_body keeps each host once.
        hosts_command='cat "$PBS_NODEFILE"',
        job_id_var="PBS_JOBID",
        # PBS Pro and Torque start a job in the home directory, not where it was submitted.
        enter_dir='cd "${PBS_O_WORKDIR:-$PWD}" || exit 1',
    )

    def __init__(self, transport, settings: Mapping[str, object] | None = None) -> None:
        super().__init__(transport, settings)
        self.flavour = str(self.settings.get("dialect") or "pbspro")
        if self.flavour not in DIALECTS:
            raise ValueError(f"unknown PBS dialect {self.flavour!r}; known: {', '.join(DIALECTS)}")
        self.account_option = str(self.settings.get("account_option") or ("-A" if self.flavour == "torque" else "-P"))
        if self.account_option not in ("-A", "-P"):
            raise ValueError(f"account_option must be -A or -P, not {self.account_option!r}")
        queue = str(self.settings.get("queue") or "")
        if queue and not _QUEUE_RE.fullmatch(queue):
            raise ValueError(f"queue {queue!r} is not a PBS destination")
        self.queue = queue
        self.direct_write = bool(self.settings.get("direct_write", True))
        self.grace_seconds = int(self.settings.get("exit_status_grace_seconds", 30))
        index_dir = str(self.settings.get("index_dir") or DEFAULT_INDEX_DIR)
        check_path(index_dir, what="index_dir")
        self.index_dir = index_dir

    # ------------------------------------------------------------------------------------------- rendering

    def directives(self, spec: JobSpec) -> list[str]:
        name = check_job_name(spec.name)
        mapping = check_mapping(spec.resources.mapping)
        lines = [f"-N {name}", "-S /bin/bash"]
        lines += self._pbspro_resources(spec, mapping) if self.flavour == "pbspro" else self._torque_resources(
            spec, mapping
        )
        if spec.group:
            lines.append(f"{self.account_option} {spec.group}")
        queue = mapping.get("queue") or self.queue
        if queue:
            lines.append(f"-q {_checked('queue', queue, _QUEUE_RE)}")
        if self.flavour == "pbspro":
            lines += [f"-o {STDOUT_FILE}", f"-e {STDERR_FILE}"]
            if self.direct_write:
                lines.append("-k oed")
        if spec.array:
            # Subjob ids, per-subjob output paths and accounting differ between PBS Pro and Torque and could
            # only be checked against recorded output here: a sweep on PBS is submitted job by job.
            raise InvalidJobSpec("PBS arrays are not submitted by Kakehashi; a sweep runs as separate jobs")
        return [f"#PBS {line}" for line in lines]

    @staticmethod
    def _cpus(spec: JobSpec) -> int:
        cpus = max(spec.resources.cpus_per_node, 1)
        return max(cpus, spec.procs) if spec.launcher == Launcher.MPIRUN else cpus

    def _pbspro_resources(self, spec: JobSpec, mapping: Mapping[str, str]) -> list[str]:
        res = spec.resources
        chunk = [str(res.nodes), f"ncpus={self._cpus(spec)}"]
        if res.gpus_per_node:
            chunk.append(f"ngpus={res.gpus_per_node}")
        if res.memory_gb:
            chunk.append(f"mem={res.memory_gb}gb")
        if spec.launcher != Launcher.SCRIPT:
            # PBS_NODEFILE then lists each host once per process, which is what mpirun's hostfile expects.
            chunk.append(f"mpiprocs={spec.procs}")
        if extra := mapping.get("select"):
            chunk.append(_checked("select resources", extra, _CHUNK_RE))
        lines = [f"-l select={':'.join(chunk)}", f"-l walltime={hms(spec.walltime_seconds)}"]
        # Without a place statement PBS Pro may pack several chunks onto one host.
        place = mapping.get("place") or ("scatter" if res.nodes > 1 else "")
        if place:
            lines.append(f"-l place={_checked('place', place, _PLACE_RE)}")
        return lines

    def _torque_resources(self, spec: JobSpec, mapping: Mapping[str, str]) -> list[str]:
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

    def render(self, spec: JobSpec) -> str:
        validate_spec(spec)
        return assemble("#!/bin/bash", self.directives(spec), render_body(spec, self.dialect))

    # ------------------------------------------------------------------------------------------ submitting

    def _index(self) -> str:
        """The index directory as a shell word (the login node's $HOME expands there, never here)."""
        if self.index_dir.startswith("/"):
            return shlex.quote(self.index_dir.rstrip("/"))
        return '"$HOME"/' + shlex.quote(self.index_dir.removeprefix("~/").rstrip("/"))

    def submit_command(self, spec: JobSpec | None = None) -> list[str]:
        if self.flavour == "torque":
            # The slurm-wlm-torque qsub passes its own -o/-e to sbatch, so script lines would lose; real Torque
            # resolves a relative path against the submit directory, which is the job directory.
            return ["qsub", "-o", STDOUT_FILE, "-e", STDERR_FILE, SCRIPT_FILE]
        return ["qsub", SCRIPT_FILE]

    def submit(self, spec: JobSpec, script: str | None = None) -> str:
        script = script if script is not None else self.render(spec)
        index = self._index()
        # After the job id is known: link the job directory under it, so a query that knows only ids finds the
        # exit file. Best effort, and never for an "id" that is not one plain word.
        link = (
            f'{{ {{ case "$out" in ""|*[!]A-Za-z0-9._[-]*) false;; esac && mkdir -p {index} && '
            f'ln -sfn -- "$PWD" {index}/"$out" && '
            f"find {index} -maxdepth 1 -type l -mtime +{INDEX_KEEP_DAYS} -delete; }} 2>/dev/null || true; }}"
        )
        command = staged_command(spec.workdir, shlex.join(self.submit_command(spec)))
        command = f"{command} && {link}"
        result = self.transport.run_shell(command, stdin=staging_archive(spec, script))
        if not result.ok:
            raise submit_error(result.exit_status, result.stdout, result.stderr)
        lines = [line.strip() for line in result.stdout.splitlines() if line.strip()]
        job_id = lines[-1] if lines else ""
        if not _ID_RE.match(job_id):
            raise BackendError(f"qsub printed no job id: {result.stdout!r}")
        return job_id

    def find(self, spec: JobSpec) -> str | None:
        name = shlex.quote(check_job_name(spec.name))
        if self.flavour == "pbspro":
            lookup = f'qselect -x -u "$(id -un)" -N {name} 2>/dev/null'
        else:
            # Torque's qselect is missing from the wrappers and the short qstat cuts names at 16 characters.
            lookup = (
                f"qstat -f 2>/dev/null | awk -v n={name} "
                "'/^Job Id:/ {id = $3} $1 == \"Job_Name\" && $3 == n {print id}'"
            )
        result = self.transport.run_shell(f"{recorded_id_command(spec.workdir)}; {lookup}; true")
        for line in result.stdout.split():
            if _ID_RE.match(line.strip()):
                return line.strip()
        return None

    def cancel(self, scheduler_id: str) -> None:
        (job_id,) = _check_ids([scheduler_id])
        quoted = shlex.quote(job_id)
        # The marker goes first: once qdel has killed the job, nothing else will say that this was a cancel.
        command = (
            f'd={self._index()}/{quoted}; if [ -d "$d/" ]; then date +%s > "$d/{CANCEL_FILE}"; fi 2>/dev/null; '
            f"qdel {quoted}"
        )
        result = self.transport.run_shell(command)
        if result.ok or not result.message or _GONE_RE.search(result.message):
            return
        raise BackendError(f"qdel {job_id} failed (exit {result.exit_status}): {result.message}")

    # ------------------------------------------------------------------------------------------- tracking

    def query_command(self, ids: Sequence[str]) -> str:
        quoted = " ".join(shlex.quote(i) for i in ids)
        qstat = f"qstat -f -F json -x {quoted}" if self.flavour == "pbspro" else f"qstat -f {quoted}"
        return (
            f"TZ=UTC0 {qstat}; rc=$?; printf '\\n#kakehashi-qstat-rc %s\\n#kakehashi-now %s\\n' \"$rc\" \"$(date +%s)\"; "
            f"for id in {quoted}; do d={self._index()}/\"$id\"; [ -d \"$d/\" ] || continue; "
            f"s=$(head -c 32 \"$d/{EXIT_FILE}\" 2>/dev/null | tr -dc 0-9-); "
            f"t=$(stat -c %Y \"$d/{EXIT_FILE}\" 2>/dev/null); c=0; [ -e \"$d/{CANCEL_FILE}\" ] && c=1; "
            "printf '#kakehashi-job %s %s %s %s\\n' \"$id\" \"${s:--}\" \"${t:--}\" \"$c\"; done"
        )

    def observe(self, scheduler_ids: Sequence[str]) -> dict[str, Observation]:
        """Everything one query says about these jobs: the queue, the history, and each job directory."""
        ids = _check_ids(scheduler_ids)
        if not ids:
            return {}
        result = self.transport.run_shell(self.query_command(ids))
        return parse_query(self.flavour, ids, result.stdout, result.stderr, result.exit_status, self.grace_seconds)

    def statuses(self, scheduler_ids: Sequence[str]) -> dict[str, JobStatus]:
        return {i: o.status() for i, o in self.observe(scheduler_ids).items() if o.listed}

    def final_records(self, scheduler_ids: Sequence[str]) -> dict[str, JobRecord]:
        return {i: o.record() for i, o in self.observe(scheduler_ids).items() if o.state.is_final}


def parse_query(
    flavour: str, ids: Sequence[str], stdout: str, stderr: str, exit_status: int, grace_seconds: int = 30
) -> dict[str, Observation]:
    """The output of `PBSBackend.query_command` as one Observation per job that qstat or the index knows."""
    trailer = list(_TRAILER_RC.finditer(stdout))
    if not trailer:
        raise BackendError(f"the status query did not run to its end (exit {exit_status}): {(stderr or stdout)[:500]}")
    qstat_out, rest = stdout[: trailer[-1].start()], stdout[trailer[-1].start():]
    rc, now, index = parse_trailer(rest)
    if rc:
        unexpected = [line for line in stderr.splitlines() if line.strip() and not _UNKNOWN_RE.search(line)]
        if unexpected:
            raise BackendError(f"qstat failed (exit {rc}): {' '.join(unexpected)[:500]}")
    jobs = parse_qstat_json(qstat_out) if flavour == "pbspro" else parse_qstat_text(qstat_out)
    by_sequence: dict[str, list[str]] = {}
    for listed_id in jobs:
        by_sequence.setdefault(_sequence(listed_id), []).append(listed_id)
    observations: dict[str, Observation] = {}
    for job_id in ids:
        attributes = jobs.get(job_id)
        if attributes is None and len(by_sequence.get(_sequence(job_id), [])) == 1:
            attributes = jobs[by_sequence[_sequence(job_id)][0]]
        entry = index.get(job_id)
        if attributes is not None:
            if flavour == "pbspro":
                observations[job_id] = judge_pbspro(job_id, attributes, entry)
            else:
                observations[job_id] = judge_torque(job_id, attributes, entry, now, grace_seconds)
        elif entry is not None and (unlisted := judge_unlisted(job_id, entry)) is not None:
            observations[job_id] = unlisted
    return observations


def submit_error(exit_status: int, stdout: str, stderr: str) -> BackendError:
    """SubmitRefused with the scheduler's own words, or BackendError for what may pass by itself."""
    text = f"{stdout}\n{stderr}"
    message = ""
    if _WRAPPER_FAILURE in text:
        # slurm-wlm-torque: "...and the output was:\n'sbatch: error: ...\n'" on stdout.
        output = text.split("and the output was:", 1)[-1]
        lines = [line.strip().strip("'").strip() for line in output.splitlines()]
        message = "; ".join(
            line.replace("sbatch: error:", "").strip() for line in lines if line and "sbatch: error:" in line
        )
    if not message:
        lines = [line.strip() for line in text.splitlines() if line.strip().startswith("qsub:")]
        message = "; ".join(line.removeprefix("qsub:").strip() for line in lines)
    if message and not _TRANSIENT_RE.search(message):
        return SubmitRefused(message)
    detail = (stderr.strip() or stdout.strip())[:2000]
    return BackendError(f"qsub failed (exit {exit_status}): {detail}")
