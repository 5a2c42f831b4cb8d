"""What PBS Pro and Torque have in common to read, by pure functions: times and durations as qstat prints them,
the trailer the query command adds (qstat's exit code, the login node's clock, each job directory's exit file
and cancel marker), how a job killed by the scheduler is told apart, and qsub's refusals. The dialects' own
`qstat` readers are in backends/pbspro.py and backends/torque.py; tests on recorded outputs are in
tests/backends/test_pbs.py.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime

from backends.base import BackendError, JobRecord, JobStatus, Load, State, SubmitRefused
from backends.script import hms

# Failures that may pass by themselves: never shown to a researcher as a refusal of their job.
_TRANSIENT_RE = re.compile(
    r"cannot connect to server|connection refused|no route to host|errno=15010|communication failure"
    r"|timed out|temporarily unavailable|try again|server shutting down|premature end of message"
    r"|unable to contact slurm controller|socket timed out|problem loading jobs",
    re.IGNORECASE,
)
# What qstat says about ids it does not (or no longer) know; anything else on stderr is a failure.
_UNKNOWN_RE = re.compile(r"Unknown Job Id|Job has finished", re.IGNORECASE)
_WRAPPER_FAILURE = "There was an error running the Slurm sbatch command"

_MARK = "#kakehashi-"
_TRAILER_RC = re.compile(r"^#kakehashi-qstat-rc (\d+)$", re.MULTILINE)


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
    signal: int | None = None
    cancelled_by: str = ""  # PBS keeps no name of who deleted a job in what is read here
    settled: bool = True  # the job's own word (its exit file, qstat's): nothing else of the job's is read here

    def status(self) -> JobStatus:
        return JobStatus(self.scheduler_id, self.state, self.reason, self.exit_code)

    def record(self) -> JobRecord:
        return JobRecord(**{f.name: getattr(self, f.name) for f in fields(JobRecord)})


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


# A dialect's reading of one job qstat lists: (job id, attributes, index entry, login node's clock) -> Observation.
Judge = Callable[[str, Mapping[str, str], "IndexEntry | None", "datetime | None"], "Observation"]


def parse_query(
    ids: Sequence[str], stdout: str, stderr: str, exit_status: int,
    parse_qstat: Callable[[str], dict[str, dict[str, str]]], judge: Judge,
) -> dict[str, Observation]:
    """The output of `PBSBase.query_command` as one Observation per job that qstat or the index knows, read
    with a dialect's `parse_qstat` and `judge`."""
    trailer = list(_TRAILER_RC.finditer(stdout))
    if not trailer:
        raise BackendError(f"the status query did not run to its end (exit {exit_status}): {(stderr or stdout)[:500]}")
    qstat_out, rest = stdout[: trailer[-1].start()], stdout[trailer[-1].start():]
    rc, now, index = parse_trailer(rest)
    if rc:
        unexpected = [line for line in stderr.splitlines() if line.strip() and not _UNKNOWN_RE.search(line)]
        if unexpected:
            raise BackendError(f"qstat failed (exit {rc}): {' '.join(unexpected)[:500]}")
    jobs = parse_qstat(qstat_out)
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
            observations[job_id] = judge(job_id, attributes, entry, now)
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


# ------------------------------------------------------------------------------- how busy the cluster is

_PBS_WAITING = {"Q", "H", "W", "T", "S"}  # queued, held, waiting for its start time, moving, suspended
_PBS_RUNNING = {"R", "E", "B"}  # running, exiting, an array with tasks running


def parse_pbs_load(text: str) -> Load:
    """`qstat` (the job table: id, name, user, time, state, queue), the marker `@@nodes RC`, then `pbsnodes -a`
    (a node's name at the line start, then indented `state = free`). Ended jobs (C, F, X) do not count; a node
    is free when its state is exactly `free`; free nodes are unknown (None) where pbsnodes failed."""
    jobs, _, nodes_part = text.partition("@@nodes")
    pending = running = 0
    per_queue: dict[str, int] = {}
    for line in jobs.splitlines():
        parts = line.split()
        if len(parts) < 6 or not parts[0][:1].isdigit():
            continue
        state, queue = parts[-2], parts[-1]
        if state in _PBS_WAITING:
            pending += 1
            per_queue[queue] = per_queue.get(queue, 0) + 1
        elif state in _PBS_RUNNING:
            running += 1
    rc, _, listing = nodes_part.partition("\n")
    states: dict[str, str] = {}
    node = ""
    for line in listing.splitlines():
        if line and not line[0].isspace():
            node = line.strip()
            states[node] = ""
        elif node and line.strip().startswith("state ="):
            states[node] = line.split("=", 1)[1].strip()
    if rc.strip() != "0":
        return Load(pending=pending, running=running, per_queue=per_queue)
    return Load(pending=pending, running=running, free_nodes=sum(1 for s in states.values() if s == "free"),
                total_nodes=len(states), per_queue=per_queue)
