"""What Grid Engine prints, read by pure functions: `qsub -terse`, `qstat -xml`, `qacct -j` and the lookup of a
job by name. Tested on outputs recorded from the test cluster's Son of Grid Engine 8.1.9 and on what Univa/Altair
Grid Engine 8.x, Open Grid Scheduler and SGE 6 printed at other sites (tests/backends/fixtures/sge, see its README);
backends/sge.py runs the commands.

qacct prints times with ctime() in the login node's local zone; the commands set TZ=UTC0, so the times are UTC.

Why one module: every function reads one of Grid Engine's outputs and they share their private readers (the
XML guard, qacct's rows, task ranges); split, one scheduler's parsers would import each other's helpers. Pure
functions only, tested on recorded outputs, as backends/pbs_parse.py is for PBS.
"""

from __future__ import annotations

import re
import signal
import xml.etree.ElementTree as ET  # noqa: S405 - DTDs are refused before parsing, see _parse_xml
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from backends.base import BackendError, JobRecord, JobStatus, Load, State

_ID_RE = re.compile(r"^\d+$")
# `qsub -terse` prints "123", or "123.1-4:1" for an array job.
_TERSE_RE = re.compile(r"^(\d+)(\.\d+(-\d+(:\d+)?)?)?$")

# qacct `failed` codes (the shepherd's failure codes) with a meaning of their own here. SoGE and Open Grid Scheduler
# have one code for every limit qmaster enforces; Univa/Altair Grid Engine's execd names the limit it enforced, and
# writes no `category` line, so the h_rt asked for (in the script) is nowhere in its record.
_FAILED_AFTER_JOB = 100  # "assumedly after job": what a qdel of a running job leaves (on Univa, any other kill too)
_ENFORCED_BY_CODE = {  # the limits a code names, for a `failed` line without its text
    37: ("h_rt", "h_cpu", "h_vmem"),  # SoGE/OGS: "qmaster enforced h_rt, h_cpu, or h_vmem limit"
    44: ("h_rt",),  # Univa/Altair: "execd enforced h_rt limit"
}
_ENFORCED_RE = re.compile(r"enforced\s+(.*?)\s*limit", re.IGNORECASE)
_LIMIT_NAME_RE = re.compile(r"\b[hs]_[a-z]+\b")
_SIGKILL_STATUS = 137

# What qsub says when it refuses the job itself: SGE's own words, and those of sites' qsub wrappers (TSUBAME 4.0's
# "Job is rejected, h_rt can not be longer than 10 mins with this group", "qsub: Unknown option").
_REFUSALS = ("unable to run job", "job rejected", "job is rejected", "invalid option", "unknown option")
# Messages that mean qmaster could not be asked (retry later), as opposed to a refusal of the job itself.
_TRANSIENT = (
    "unable to contact qmaster",
    "commlib error",
    "failed receiving gdi request",
    "unable to send message to qmaster",
    "can't unpack gdi request",
    "error reading answer list",
    "sge_qmaster",  # "cannot reach sge_qmaster", "sge_qmaster is down"
)


def is_refusal(message: str) -> bool:
    lowered = message.lower()
    if any(marker in lowered for marker in _TRANSIENT):
        return False
    return any(marker in lowered for marker in _REFUSALS)


def qsub_error(message: str) -> str:
    """The scheduler's own words, without qsub's framing ("Unable to run job: ...", "Exiting.")."""
    lines = []
    for line in message.splitlines():
        line = line.strip()
        if not line or line == "Exiting.":
            continue
        for prefix in ("Unable to run job:", "job rejected:", "error:"):
            if line.startswith(prefix):
                line = line[len(prefix) :].strip()
        lines.append(line)
    return "; ".join(lines) or message


def terse_id(stdout: str) -> str | None:
    for line in reversed(stdout.strip().splitlines()):
        match = _TERSE_RE.match(line.strip())
        if match:
            return match.group(1)
    return None


def _parse_xml(text: str) -> ET.Element:
    # qstat never writes a DTD; refusing one rules out entity expansion tricks from whatever the login node sends.
    if "<!DOCTYPE" in text or "<!ENTITY" in text:
        raise BackendError("qstat -xml output holds a DTD; refusing to parse it")
    return ET.fromstring(text)  # noqa: S314 - no DTD possible (checked above), expat without external entities


def parse_find(stdout: str) -> str | None:
    sections: dict[str, list[str]] = {}
    current = ""
    for line in stdout.splitlines():
        if line.startswith("@@"):
            current = line[2:].strip()
            sections[current] = []
        else:
            sections.setdefault(current, []).append(line)
    for line in sections.get("recorded", []):
        if job_id := terse_id(line):
            return job_id
    queue_xml = "\n".join(sections.get("queue", [])).strip()
    if queue_xml:
        try:
            root = _parse_xml(queue_xml)
        except (ET.ParseError, BackendError):
            root = None
        if root is not None:
            # Son of Grid Engine wraps each job in <element>; Univa/Altair GE and Open Grid Scheduler put the job's
            # fields straight under <djob_info>. Missing either layout would let a retry submit the job twice.
            numbers = [
                el.text.strip()
                for path in ("./djob_info/element/JB_job_number", "./djob_info/JB_job_number")
                for el in root.findall(path)
                if el.text
            ]
            numbers = [n for n in numbers if _ID_RE.match(n)]
            if numbers:
                return max(numbers, key=int)
        else:
            numbers = re.findall(r"<JB_job_number>(\d+)</JB_job_number>", queue_xml)
            if numbers:
                return max(numbers, key=int)
    accounted = [line.strip() for line in sections.get("accounting", []) if _ID_RE.match(line.strip())]
    return max(accounted, key=int) if accounted else None


@dataclass(frozen=True)
class _QueueEntry:
    job_id: str
    code: str  # the state letters: qw, hqw, r, t, Rr, dr, s, S, T, Eqw, ...
    listed: str  # "running" (queue_info), "pending" (job_info), "zombie" (job_info, ended; -s z)
    tasks: str = ""  # array jobs only: "4" (a running task), "5,6,8,10" or "3-10:1" (tasks waiting alike)


def _queue_entries(text: str) -> Iterable[_QueueEntry]:
    try:
        root = _parse_xml(text)
    except ET.ParseError:
        # One foreign job with a name qstat mis-escapes must not blind us to everyone's jobs: fall back to the
        # flat structure qstat always writes.
        for block in re.findall(r"<job_list\s+state=\"(\w+)\">(.*?)</job_list>", text, re.S):
            listed, body = block
            number = re.search(r"<JB_job_number>(\d+)</JB_job_number>", body)
            state = re.search(r"<state>([A-Za-z]+)</state>", body)
            tasks = re.search(r"<tasks>([0-9,:-]+)</tasks>", body)
            if number and state:
                yield _QueueEntry(number.group(1), state.group(1), listed, tasks.group(1) if tasks else "")
        return
    for job in root.iter("job_list"):
        number = (job.findtext("JB_job_number") or "").strip()
        code = (job.findtext("state") or "").strip()
        if _ID_RE.match(number):
            yield _QueueEntry(number, code, job.get("state", ""), (job.findtext("tasks") or "").strip())


_TASK_RANGE_RE = re.compile(r"(\d+)(?:-(\d+)(?::(\d+))?)?")


def task_ranges(tasks: str) -> list[range]:
    """qstat's task list ("4", "5,6,8,10", "3-10:1", "1,4-10:3") as ranges: membership needs no expansion,
    however many tasks someone's array has."""
    ranges = []
    for part in tasks.split(","):
        match = _TASK_RANGE_RE.fullmatch(part.strip())
        if not match:
            continue
        first = int(match.group(1))
        last = int(match.group(2) or first)
        step = int(match.group(3) or 1)
        ranges.append(range(first, last + 1, max(step, 1)))
    return ranges


def _queue_status(entry: _QueueEntry, scheduler_id: str) -> JobStatus:
    code = entry.code
    if "E" in code:
        # Error state: the shepherd failed to start the job (e.g. an output path it cannot write) and SGE
        # will not try again unless someone clears it. Reported as final and stuck, so the portal asks
        # accounting, which holds the cause (`failed 26 : opening input/output file`), then deletes the entry.
        return JobStatus(scheduler_id, State.FAILED, f"Grid Engine could not start the job (error state {code})",
                         stuck=True)
    running = entry.listed == "running" or "r" in code or "t" in code
    reasons = []
    if "d" in code:
        reasons.append("being deleted")
    if "s" in code or "S" in code or "T" in code:
        reasons.append(f"suspended ({code})")
    if not running and "h" in code:
        reasons.append(f"held ({code})")
    if "t" in code and "r" not in code:
        reasons.append("starting (being transferred to its host)")
    return JobStatus(scheduler_id, State.RUNNING if running else State.PENDING, "; ".join(reasons))


# Jobs that have ended but that qmaster still keeps (`finished_jobs`) are listed under this name when `-s z` is in
# force (a site's or user's sge_qstat defaults file can put it there); their <state> is whatever the task last had
# (Univa at CC-IN2P3 printed "qw"). Not in the queue any more: accounting has the outcome.
_FINISHED_LISTING = "zombie"

# An array job is listed once per running task and once for its waiting tasks: the liveliest entry speaks.
_LIVELINESS = {State.RUNNING: 2, State.PENDING: 1, State.FAILED: 0}


def _wanted_tasks(wanted: set[str]) -> dict[str, list[int]]:
    """Task ids ("123.4") of `wanted` by job number."""
    tasks: dict[str, list[int]] = {}
    for scheduler_id in wanted:
        job_id, dot, task = scheduler_id.partition(".")
        if dot and task.isdigit():
            tasks.setdefault(job_id, []).append(int(task))
    return tasks


def _entry_ids(entry: _QueueEntry, wanted: set[str], tasks: Mapping[str, list[int]]) -> list[str]:
    """The ids of `wanted` a queue entry speaks for: its job, and its tasks asked for as "123.4"."""
    ids = [entry.job_id] if entry.job_id in wanted else []
    if entry.tasks and entry.job_id in tasks:
        ranges = task_ranges(entry.tasks)
        ids += [f"{entry.job_id}.{t}" for t in tasks[entry.job_id] if any(t in r for r in ranges)]
    return ids


def parse_qstat_xml(text: str, wanted: set[str]) -> dict[str, JobStatus]:
    """Jobs of `wanted` in `qstat -xml` output. An array job is RUNNING while any of its tasks runs; one of
    its tasks, asked for as "123.4", has the state of its own entry (error state included)."""
    tasks = _wanted_tasks(wanted)
    statuses: dict[str, JobStatus] = {}
    for entry in _queue_entries(text):
        if entry.listed == _FINISHED_LISTING:
            continue
        for scheduler_id in _entry_ids(entry, wanted, tasks):
            status = _queue_status(entry, scheduler_id)
            known = statuses.get(scheduler_id)
            if known is None or _LIVELINESS[known.state] < _LIVELINESS[status.state]:
                statuses[scheduler_id] = status
    return statuses


# qacct prints times with ctime() (SoGE, OGS), "MM/DD/YYYY HH:MM:SS.mmm" (Univa/Altair GE 8.2+) or
# "YYYY-MM-DD HH:MM:SS.uuuuuu" (Open Cluster Scheduler 9, SoGE's successor: sge_ctime64 in its sge_time.cc).
_TIME_FORMATS = (
    "%a %b %d %H:%M:%S %Y",
    "%m/%d/%Y %H:%M:%S.%f",
    "%m/%d/%Y %H:%M:%S",
    "%Y-%m-%d %H:%M:%S.%f",
    "%Y-%m-%d %H:%M:%S",
)


def parse_qacct_time(value: str) -> datetime | None:
    """A qacct time printed under TZ=UTC0; None for "-/-" (never started), "undefined" and the epoch."""
    value = " ".join(value.split())
    if value.isdigit():
        return datetime.fromtimestamp(int(value), UTC) if int(value) > 0 else None
    for fmt in _TIME_FORMATS:
        try:
            parsed = datetime.strptime(value, fmt).replace(tzinfo=UTC)
        except ValueError:
            continue
        return parsed if parsed.year > 1970 else None
    return None


def _leading_int(value: str) -> int | None:
    match = re.match(r"\s*(-?\d+)", value)
    return int(match.group(1)) if match else None


def _seconds(value: str) -> int | None:
    """ru_wallclock: "6s" (SoGE), "6" (OGS, OCS) or "0.812" (Univa/Altair)."""
    match = re.match(r"\s*(\d+)(\.\d+)?s?\s*$", value)
    return int(match.group(1)) if match else None


def _requested_h_rt(row: Mapping[str, str]) -> int | None:
    """The h_rt asked for, in seconds (given as seconds or H:M:S): SoGE's `category` holds the job's requests
    ("-u alice -l f_node=2,h_rt=600 -pe smp 4"); Univa/Altair only keep the qsub command line (`submit_cmd`)."""
    for field in ("category", "submit_cmd"):
        for request in re.findall(r"(?:^|\s)-l\s+(\S+)", row.get(field, "")):
            if match := re.search(r"(?:^|,)h_rt=([0-9:]+)(?:,|$)", request):
                total = 0
                for part in match.group(1).split(":"):
                    total = total * 60 + int(part or 0)
                return total
    return None


def _enforced_limits(failed: int, why: str) -> tuple[str, ...]:
    """The limits a `failed` line says the scheduler enforced: ("h_rt",) for Univa/Altair's "execd enforced h_rt
    limit", all three for SoGE's "qmaster enforced h_rt, h_cpu, or h_vmem limit", () for anything else."""
    match = _ENFORCED_RE.search(why)
    return (tuple(_LIMIT_NAME_RE.findall(match.group(1))) if match else ()) or _ENFORCED_BY_CODE.get(failed, ())


def _exit_reason(status: int) -> str:
    """What the job page says of an exit status: the shell's 128+N is signal N whatever printed it ("137 (Killed)"
    on SoGE, plain "137" on Univa); a status no shell returns is shown as accounting wrote it."""
    if not 0 <= status <= 255:
        return f"exit status {status} in accounting"
    if 128 < status < 128 + 65:
        try:
            return f"exit code {status} ({signal.Signals(status - 128).name})"
        except ValueError:
            pass
    return f"exit code {status}"


def split_qacct(text: str) -> list[dict[str, str]]:
    """qacct -j output as one dict per record (records are separated by a line of '=')."""
    records: list[dict[str, str]] = []
    current: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("=" * 10):
            if current:
                records.append(current)
            current = {}
            continue
        key, _, value = line.strip().partition(" ")
        if key:
            current[key] = value.strip()
    if current:
        records.append(current)
    return records


@dataclass(frozen=True)
class _Outcome:
    state: State
    exit_code: int | None
    reason: str


def _outcome(row: Mapping[str, str]) -> _Outcome:
    """How one accounting record ended. The scheduler's own word comes first: a limit it names in `failed`, a qdel
    in `deleted_by` (Univa/Altair); then the times (SoGE's 37 names three limits); then the exit status. The exit
    code is the shell's (0-255), the same on every version; the record keeps what accounting wrote."""
    failed_text = row.get("failed", "")
    failed = _leading_int(failed_text) or 0
    why = failed_text.partition(":")[2].strip()
    exit_status = _leading_int(row.get("exit_status", ""))
    code = exit_status if exit_status is not None and 0 <= exit_status <= 255 else None
    wallclock = _seconds(row.get("ru_wallclock", ""))
    limit = _requested_h_rt(row)
    over_limit = limit is not None and wallclock is not None and wallclock >= limit
    enforced = _enforced_limits(failed, why)
    killed = exit_status == _SIGKILL_STATUS
    deleted_by = row.get("deleted_by")  # Univa/Altair only: "NONE", or who deleted it ("user@host", comma-separated)
    if enforced == ("h_rt",) or (over_limit and ("h_rt" in enforced or killed)):
        return _Outcome(State.TIMED_OUT, code, f"walltime exceeded ({f'h_rt {limit} s' if limit else why or 'h_rt'})")
    if enforced:
        return _Outcome(State.FAILED, code, f"killed by the scheduler: {why or ', '.join(enforced) + ' limit'}")
    if deleted_by and deleted_by != "NONE":
        when = "while running" if parse_qacct_time(row.get("start_time", "")) else "before it started"
        return _Outcome(State.CANCELLED, code, f"deleted (qdel by {deleted_by}) {when}")
    if failed == _FAILED_AFTER_JOB and killed and deleted_by is None:
        # SoGE and OGS keep no deleted_by: on them a qdel of a running job leaves exactly this.
        return _Outcome(State.CANCELLED, code, "deleted while running (qdel)")
    if failed == _FAILED_AFTER_JOB and exit_status is not None and exit_status > 128:
        # Univa/Altair says nobody deleted it: a signal ended it (the kernel's OOM killer, a limit in the script).
        return _Outcome(State.FAILED, code, f"{_exit_reason(exit_status)}; Grid Engine: {why or failed_text}")
    if failed:
        # Exit status 0 here is no exit code: the job never got that far.
        return _Outcome(State.FAILED, code or None, f"Grid Engine failure {failed}: {why or failed_text}")
    if exit_status == 0:
        return _Outcome(State.COMPLETED, 0, "")
    if exit_status is None:
        return _Outcome(State.FAILED, None, "no exit status in accounting")
    return _Outcome(State.FAILED, code, _exit_reason(exit_status))


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_SEVERITY = [State.COMPLETED, State.CANCELLED, State.FAILED, State.TIMED_OUT]


def _latest_submissions(rows: Iterable[dict[str, str]], job_ids: set[str]) -> dict[str, list[dict[str, str]]]:
    """The records of each of `job_ids`, from its latest submission only.

    Job numbers wrap (at 10M, or when a cluster's spool is reset) while accounting keeps the old jobs: only the
    latest submission under a number is ours. Its array tasks share one qsub_time, but the records of its parallel
    tasks (mpirun's daemons, started with `qrsh -inherit`) carry the time each task was started (SoGE: a two-node
    job submitted at 01:14:47 had its tasks' records say 01:14:48), so the latest qsub_time alone would drop the
    job's own record. A submission is a record and those submitted before everything so far had ended; an older
    submission under the number had ended before the next was submitted."""
    by_job: dict[str, list[dict[str, str]]] = {}
    for row in rows:
        if row.get("jobnumber", "") in job_ids:
            by_job.setdefault(row["jobnumber"], []).append(row)
    latest_rows = {}
    for job_id, all_rows in by_job.items():
        latest: list[dict[str, str]] = []
        ended = _EPOCH
        for row in sorted(all_rows, key=lambda r: _time(r, "qsub_time")):
            if latest and _time(row, "qsub_time") > ended:
                latest, ended = [], _EPOCH
            latest.append(row)
            ended = max(ended, _time(row, "qsub_time"), _time(row, "end_time"))
        latest_rows[job_id] = latest
    return latest_rows


def _time(row: Mapping[str, str], field: str) -> datetime:
    return parse_qacct_time(row.get(field, "")) or _EPOCH


def _own_record_missing(rows: Sequence[Mapping[str, str]]) -> bool:
    """Univa/Altair's qacct names each record's parallel task (`pe_taskid`, NONE for the job's own): the records of
    the tasks a job started (mpirun's daemons on the other nodes) end before the job does, and so are in accounting
    before the job's own, which holds its exit status. Until that one is there, the job has no final record."""
    tasks = [r["pe_taskid"] for r in rows if "pe_taskid" in r]
    return bool(tasks) and "NONE" not in tasks


def _may_lack_own_record(rows: Sequence[Mapping[str, str]]) -> bool:
    """SoGE's and OGS's qacct print no `pe_taskid`: a job that ran in a parallel environment may have tasks'
    records only, its own not written yet (seen on the test cluster: a two-node mpirun job whose ranks all exit 3
    had its two `exit_status 0` task records in accounting a second before its own `exit_status 3`)."""
    return not any("pe_taskid" in r for r in rows) and any(r.get("granted_pe", "NONE") != "NONE" for r in rows)


def _merged_record(scheduler_id: str, rows: Sequence[Mapping[str, str]]) -> JobRecord:
    """One record from several (array tasks, tightly integrated parallel tasks): the worst outcome, the
    earliest start, the latest end, the hosts counted."""
    outcomes = [_outcome(row) for row in rows]
    worst_index = max(range(len(rows)), key=lambda i: _SEVERITY.index(outcomes[i].state))
    worst, row = outcomes[worst_index], rows[worst_index]
    starts = [t for t in (parse_qacct_time(r.get("start_time", "")) for r in rows) if t]
    ends = [t for t in (parse_qacct_time(r.get("end_time", "")) for r in rows) if t]
    started, ended = (min(starts) if starts else None), (max(ends) if ends else None)
    walls = [w for w in (_seconds(r.get("ru_wallclock", "")) for r in rows) if w is not None]
    if len(rows) == 1 and walls:
        elapsed = walls[0]
    elif started and ended:
        elapsed = int((ended - started).total_seconds())
    else:
        elapsed = max(walls) if walls else None
    hosts = {r.get("hostname") for r in rows if r.get("hostname")}
    return JobRecord(
        scheduler_id=scheduler_id,
        state=worst.state,
        exit_code=worst.exit_code,
        started_at=started,
        ended_at=ended,
        elapsed_seconds=elapsed,
        nodes=len(hosts) or None,
        reason=worst.reason,
        raw=dict(row),
        # Univa/Altair name who deleted it ("root@login1"); SoGE and OGS keep no name.
        cancelled_by=(row.get("deleted_by") or "").replace("NONE", "") if worst.state == State.CANCELLED else "",
        settled=not _may_lack_own_record(rows),
    )


def _task_rows(rows: Iterable[Mapping[str, str]], task: int) -> list[Mapping[str, str]]:
    return [r for r in rows if _leading_int(r.get("taskid", "")) == task]


def parse_qacct(text: str, wanted: set[str]) -> dict[str, JobRecord]:
    """Final records from `qacct -j` output. A job's records (array tasks, tightly integrated parallel tasks)
    become one; a task asked for as "123.4" gets a record of its own records (`taskid 4`) only."""
    by_job = _latest_submissions(split_qacct(text), {i.partition(".")[0] for i in wanted})
    records: dict[str, JobRecord] = {}
    for scheduler_id in wanted:
        job_id, dot, task = scheduler_id.partition(".")
        rows = by_job.get(job_id, [])
        if dot:
            rows = _task_rows(rows, int(task)) if task.isdigit() else []
        if rows and not _own_record_missing(rows):
            records[scheduler_id] = _merged_record(scheduler_id, rows)
    return records


# ------------------------------------------------------------------------------- how busy the cluster is

_QUEUE_LINE = re.compile(r"^(?P<queue>[^@\s]+)@(?P<host>\S+)\s+\S+\s+(?:\d+/)?(?P<used>\d+)/(?P<total>\d+)\s+\S+\s+\S+"
                         r"\s*(?P<states>\S*)\s*$")
_JOB_LINE = re.compile(r"^\s*(?P<id>\d+)\s+[\d.]+\s+\S+\s+\S+\s+(?P<state>[A-Za-z]+)\s+\d\d/\d\d/\d{4}\s+\S+"
                       r"(?:\s+(?P<queue>\S+@\S+))?\s+(?P<slots>\d+)(?:\s+(?P<tasks>\S+))?\s*$")


def task_count(tasks: str | None) -> int:
    """How many array tasks a qstat tasks column names ("4", "5,6,8", "3-10:1", "1-9:2"); 1 for a plain job."""
    if not tasks:
        return 1
    count = 0
    for part in tasks.split(","):
        span, _, step = part.partition(":")
        first, _, last = span.partition("-")
        if first.isdigit() and last.isdigit():
            count += (int(last) - int(first)) // max(int(step) if step.isdigit() else 1, 1) + 1
        elif first.isdigit():
            count += 1
    return max(count, 1)


def parse_qstat_load(text: str, node_queues: Sequence[str] = ()) -> Load:
    """`qstat -f -u '*'`: queue instances with their used/total slots and states, running jobs under them, then
    the pending jobs. A host is free when every queue instance on it has nothing running and no alarm or
    disabled state; a waiting job counts once per array task; a job in error (Eqw) is not waiting to start.
    `node_queues` (the cluster's option of that name): only the hosts of these queues are nodes, where whole-node
    jobs (TSUBAME f_node, ABCI rt_AF) run on some hosts only (issue 25: not "3 of 3 nodes free" for 2 such hosts)."""
    hosts: dict[str, bool] = {}
    pending = running = 0
    in_pending = False
    for line in text.splitlines():
        if "PENDING JOBS" in line:
            in_pending = True
            continue
        queue = _QUEUE_LINE.match(line)
        if queue and not in_pending:
            if node_queues and queue["queue"] not in node_queues:
                continue
            free = queue["used"] == "0" and not queue["states"]
            hosts[queue["host"]] = hosts.get(queue["host"], True) and free
            continue
        job = _JOB_LINE.match(line)
        if not job:
            continue
        state = job["state"]
        if in_pending or "q" in state:
            if "E" in state:
                continue
            pending += task_count(job["tasks"])
        else:
            running += 1
    return Load(pending=pending, running=running, free_nodes=sum(hosts.values()), total_nodes=len(hosts))
