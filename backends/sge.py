"""Grid Engine: `#$` directives, `qsub -terse -w e`, one `qstat -xml` for many jobs, `qacct -j` for the final
word. Tested against Son of Grid Engine 8.1.9; Univa/Altair GE's qacct time format is parsed as well, but no
real Univa/Altair output was available to test with.

Site profiles (settings["site_profile"]):

- "tsubame", "abci": the centre's billing group goes on the qsub *command line* (`qsub -g GROUP job.sh`,
  a site option that SGE itself rejects inside a script) and the hardware is one site resource type counted
  in nodes (`-l f_node=2`, `-l rt_AF=2`; hardware mapping {"resource": ...}).
- "generic": plain SGE. The group is a project (`#$ -P`, or `-A` with settings {"group_as": "account"}),
  CPUs/processes are slots of a parallel environment (mapping {"pe": "smp"}), GPUs a consumable complex
  (mapping {"gpu_resource": "gpu"}, best defined consumable per JOB).

Every profile also honours mapping keys "queue" (`-q`), "resource" (`-l RES=nodes`) and "memory_resource"
(`-l RES=<memory_gb>G`). SGE reads `#$` lines anywhere in a script, which is why nothing typed by a user is
ever written as one and the payload lives in its own file.

qacct prints times with ctime() in the login node's local zone; the command sets TZ=UTC0, so the times are
UTC whatever zone the cluster is in (no setting to get wrong, no DST ambiguity).

A sweep is one array job (`-t 1-N`). Its elements are addressed in SGE's own job_task notation, "123.4": qdel
takes it as it is, qstat lists a running task as an entry of its own and the waiting ones as one entry with a
task list ("5,6,8,10", "2-10:4"), and qacct writes one record per task (`taskid 4`).
"""

from __future__ import annotations

import re
import shlex
import xml.etree.ElementTree as ET  # noqa: S405 - DTDs are refused before parsing, see _parse_xml
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
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
    State,
    SubmitRefused,
)
from backends.safety import check_group, check_job_name, check_mapping, validate_spec
from backends.script import Dialect, assemble, recorded_id_command, render_body, staged_command, staging_archive

PROFILES = ("tsubame", "abci", "generic")
# Profiles whose qsub takes the group as `-g GROUP` on the command line.
_COMMAND_LINE_GROUP = {"tsubame", "abci"}

_ID_RE = re.compile(r"^\d+$")
# What the backend takes as an id: a job, or one task of an array job ("123.4"). They reach a shell.
_SCHEDULER_ID_RE = re.compile(r"\d+(?:\.\d+)?")
# `qsub -terse` prints "123", or "123.1-4:1" for an array job.
_TERSE_RE = re.compile(r"^(\d+)(\.\d+(-\d+(:\d+)?)?)?$")
# Complex (resource) and parallel environment names: they become `-l NAME=N` / `-pe NAME N`, so no `=` or `,`
# that would smuggle in a second request.
_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")
_QUEUE_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.@*-]{0,127}")

# qacct `failed` codes (sge_execd's shepherd failure codes) with a meaning of their own here.
_FAILED_LIMIT = 37  # "qmaster enforced h_rt, h_cpu, or h_vmem limit"
_FAILED_AFTER_JOB = 100  # "assumedly after job": what a qdel of a running job leaves
_SIGKILL_STATUS = 137

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


def h_rt(seconds: int) -> str:
    hours, rest = divmod(int(seconds), 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"


def _check_ids(ids: Sequence[str]) -> list[str]:
    bad = [i for i in ids if not isinstance(i, str) or not _SCHEDULER_ID_RE.fullmatch(i)]
    if bad:
        raise BackendError(f"not Grid Engine job ids: {bad!r}")
    return list(dict.fromkeys(ids))


def _check_name(kind: str, value: str, pattern: re.Pattern[str] = _NAME_RE) -> str:
    if not pattern.fullmatch(value):
        raise InvalidJobSpec(f"hardware mapping {kind}={value!r} is not a Grid Engine {kind} name")
    return value


class SGEBackend(Backend):
    kind = "sge"
    supports_arrays = True
    directive_prefix = "#$"
    dialect = Dialect(
        # A parallel environment lists its hosts in $PE_HOSTFILE ("host slots queue ..."); ABCI also
        # writes $SGE_JOB_HOSTLIST. Without either, the body falls back to `hostname`.
        hosts_command=(
            'if [ -r "${PE_HOSTFILE:-}" ]; then awk \'{print $1}\' "$PE_HOSTFILE"; '
            'elif [ -r "${SGE_JOB_HOSTLIST:-}" ]; then cat "$SGE_JOB_HOSTLIST"; fi'
        ),
        job_id_var="JOB_ID",
        multi_node_prefix="mpirun",
        array_index_var="SGE_TASK_ID",
    )

    def __init__(self, transport, settings: Mapping[str, object] | None = None) -> None:
        super().__init__(transport, settings)
        profile = str(self.settings.get("site_profile") or "generic")
        if profile not in PROFILES:
            raise ValueError(f"unknown Grid Engine site profile {profile!r}; known: {', '.join(PROFILES)}")
        self.profile = profile

    # ------------------------------------------------------------------------------------------- rendering

    def directives(self, spec: JobSpec) -> list[str]:
        res = spec.resources
        mapping = check_mapping(res.mapping)
        for key in ("resource", "pe", "gpu_resource", "memory_resource"):
            if key in mapping:
                _check_name(key, mapping[key])
        if "queue" in mapping:
            _check_name("queue", mapping["queue"], _QUEUE_RE)
        lines = [
            "-S /bin/bash",  # sites in posix_compliant mode would otherwise start the queue's shell (csh)
            f"-N {check_job_name(spec.name)}",
            "-cwd",
            # qsub expands the pseudo variable $TASK_ID in these paths: each array element writes its own files.
            f"-o $TASK_ID/{STDOUT_FILE}" if spec.array else f"-o {STDOUT_FILE}",
            f"-e $TASK_ID/{STDERR_FILE}" if spec.array else f"-e {STDERR_FILE}",
            "-j n",
        ]
        if spec.group and self.profile not in _COMMAND_LINE_GROUP:
            flag = "-A" if self.settings.get("group_as") == "account" else "-P"
            lines.append(f"{flag} {check_group(spec.group)}")
        if queue := mapping.get("queue"):
            lines.append(f"-q {_check_name('queue', queue, _QUEUE_RE)}")
        if resource := mapping.get("resource"):
            lines.append(f"-l {_check_name('resource', resource)}={res.nodes}")
        if pe := mapping.get("pe") or self.settings.get("pe"):
            slots = res.nodes * max(res.cpus_per_node, spec.procs, 1)
            lines.append(f"-pe {_check_name('pe', str(pe))} {slots}")
        gpu_resource = mapping.get("gpu_resource") or self.settings.get("gpu_resource")
        if gpu_resource and res.gpus_per_node:
            lines.append(f"-l {_check_name('gpu_resource', str(gpu_resource))}={res.gpus_per_node}")
        if (memory := mapping.get("memory_resource")) and res.memory_gb:
            lines.append(f"-l {_check_name('memory_resource', memory)}={int(res.memory_gb)}G")
        lines.append(f"-l h_rt={h_rt(spec.walltime_seconds)}")
        if spec.array:
            lines.append(f"-t 1-{spec.array_size}")
        return [f"#$ {line}" for line in lines]

    def render(self, spec: JobSpec) -> str:
        validate_spec(spec)
        return assemble("#!/bin/bash", self.directives(spec), render_body(spec, self.dialect))

    def submit_command(self, spec: JobSpec) -> list[str]:
        """The qsub argv, run inside the job directory. `-w e` makes an impossible request fail at once
        ("no suitable queues") instead of waiting in the queue forever."""
        argv = ["qsub"]
        if spec.group and self.profile in _COMMAND_LINE_GROUP:
            # First: a site wrapper that scans its options naively (as the test cluster's does) takes the
            # first word that is not an option, e.g. the "e" of "-w e", for the script and stops there.
            argv += ["-g", check_group(spec.group)]
        return [*argv, "-terse", "-w", "e", SCRIPT_FILE]

    # ------------------------------------------------------------------------------------------ submitting

    def submit(self, spec: JobSpec, script: str | None = None) -> str:
        script = script if script is not None else self.render(spec)
        command = staged_command(spec.workdir, shlex.join(self.submit_command(spec)))
        result = self.transport.run_shell(command, stdin=staging_archive(spec, script))
        if not result.ok:
            message = result.message
            if _is_refusal(message):
                raise SubmitRefused(qsub_error(message))
            raise BackendError(f"qsub failed (exit {result.exit_status}): {message}")
        job_id = _terse_id(result.stdout)
        if job_id is None:
            raise BackendError(f"qsub printed no job id: {result.stdout!r}")
        return job_id

    def find(self, spec: JobSpec) -> str | None:
        name = shlex.quote(check_job_name(spec.name))
        # Three sources in one round trip, each after a marker line: the id the submit command wrote beside
        # the script, the queue (qstat -j takes a job name too), accounting (finished jobs).
        command = (
            f"echo @@recorded; {recorded_id_command(spec.workdir)}; "
            f"echo @@queue; qstat -xml -j {name} 2>/dev/null; "
            f"echo @@accounting; qacct -j {name} 2>/dev/null | awk '$1 == \"jobnumber\" {{print $2}}'; true"
        )
        result = self.transport.run_shell(command)
        return parse_find(result.stdout)

    def element_id(self, array_id: str, index: int) -> str:
        return f"{array_id}.{index}"

    def cancel(self, scheduler_id: str) -> None:
        (job_id,) = _check_ids([scheduler_id])
        # "qdel 123.4" deletes that task only. Gone already: 'job "123" task "4" does not exist' while the
        # array lives on, 'denied: job "123" does not exist' once it has ended.
        result = self.transport.run(["qdel", job_id])
        if not result.ok and "does not exist" not in result.message:
            raise BackendError(f"qdel {job_id} failed: {result.message}")

    # ------------------------------------------------------------------------------------------- tracking

    def statuses(self, scheduler_ids: Sequence[str]) -> dict[str, JobStatus]:
        ids = _check_ids(scheduler_ids)
        if not ids:
            return {}
        # qstat has no "these ids" filter short of -j (whose XML is a page per job): list every user's jobs
        # once and pick ours. Finished jobs leave the list; accounting has them.
        result = self.transport.run_shell("qstat -xml -u '*'")
        if not result.ok:
            raise BackendError(f"qstat failed: {result.message}")
        return parse_qstat_xml(result.stdout, set(ids))

    def final_records(self, scheduler_ids: Sequence[str]) -> dict[str, JobRecord]:
        ids = _check_ids(scheduler_ids)
        if not ids:
            return {}
        # qacct takes one job per call: loop on the login node so it stays one SSH exec. A job's output holds
        # all its tasks' records, so elements of one array cost one qacct. A job without a record (not flushed
        # yet, or deleted while pending) prints "error: job id N not found".
        jobs = dict.fromkeys(i.partition(".")[0] for i in ids)
        command = f'for id in {" ".join(jobs)}; do TZ=UTC0 LC_ALL=C qacct -j "$id"; done'
        result = self.transport.run_shell(command)
        unexpected = [
            line
            for line in result.stderr.splitlines()
            if line.strip() and not re.fullmatch(r"error: job id \d+ not found", line.strip())
        ]
        if unexpected:
            raise BackendError(f"qacct failed: {'; '.join(unexpected)[:2000]}")
        return parse_qacct(result.stdout, set(ids))


# ----------------------------------------------------------------------------------------------- parsing


def _is_refusal(message: str) -> bool:
    lowered = message.lower()
    if any(marker in lowered for marker in _TRANSIENT):
        return False
    return "unable to run job" in lowered or "job rejected" in lowered or "invalid option" in lowered


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


def _terse_id(stdout: str) -> str | None:
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
        if job_id := _terse_id(line):
            return job_id
    queue_xml = "\n".join(sections.get("queue", [])).strip()
    if queue_xml:
        try:
            root = _parse_xml(queue_xml)
        except (ET.ParseError, BackendError):
            root = None
        if root is not None:
            numbers = [el.text.strip() for el in root.findall("./djob_info/element/JB_job_number") if el.text]
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
    listed: str  # "running" (queue_info) or "pending" (job_info)
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
        for scheduler_id in _entry_ids(entry, wanted, tasks):
            status = _queue_status(entry, scheduler_id)
            known = statuses.get(scheduler_id)
            if known is None or _LIVELINESS[known.state] < _LIVELINESS[status.state]:
                statuses[scheduler_id] = status
    return statuses


# qacct prints times with ctime() (SoGE), or "MM/DD/YYYY HH:MM:SS.mmm" (Univa/Altair GE 8.2+).
_TIME_FORMATS = ("%a %b %d %H:%M:%S %Y", "%m/%d/%Y %H:%M:%S.%f", "%m/%d/%Y %H:%M:%S")


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
    """ru_wallclock: "6s" (SoGE), "6" or "6.000" (older/other builds)."""
    match = re.match(r"\s*(\d+)(\.\d+)?s?\s*$", value)
    return int(match.group(1)) if match else None


def _requested_h_rt(category: str) -> int | None:
    """h_rt from the category ("-l f_node=2,h_rt=600 -pe smp 4"): seconds, or H:M:S as submitted."""
    match = re.search(r"(?:^|[\s,])h_rt=([0-9:]+)", category)
    if not match:
        return None
    total = 0
    for part in match.group(1).split(":"):
        total = total * 60 + int(part or 0)
    return total


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
    failed_text = row.get("failed", "")
    failed = _leading_int(failed_text) or 0
    failed_why = failed_text.partition(":")[2].strip()
    exit_status = _leading_int(row.get("exit_status", ""))
    wallclock = _seconds(row.get("ru_wallclock", ""))
    limit = _requested_h_rt(row.get("category", ""))
    over_limit = limit is not None and wallclock is not None and wallclock >= limit
    if over_limit and (failed == _FAILED_LIMIT or exit_status == _SIGKILL_STATUS):
        return _Outcome(State.TIMED_OUT, exit_status, f"walltime exceeded (h_rt {limit} s)")
    if failed == _FAILED_LIMIT:
        return _Outcome(State.FAILED, exit_status, f"killed by the scheduler: {failed_why or 'resource limit'}")
    if failed == _FAILED_AFTER_JOB and exit_status == _SIGKILL_STATUS:
        return _Outcome(State.CANCELLED, exit_status, "deleted while running (qdel)")
    if failed:
        code = exit_status if exit_status else None
        return _Outcome(State.FAILED, code, f"Grid Engine failure {failed}: {failed_why or failed_text}")
    if exit_status == 0:
        return _Outcome(State.COMPLETED, 0, "")
    if exit_status is None:
        return _Outcome(State.FAILED, None, "no exit status in accounting")
    return _Outcome(State.FAILED, exit_status, f"exit code {exit_status}")


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_SEVERITY = [State.COMPLETED, State.CANCELLED, State.FAILED, State.TIMED_OUT]


def _latest_submissions(rows: Iterable[dict[str, str]], job_ids: set[str]) -> dict[str, list[dict[str, str]]]:
    """The records of each of `job_ids`, from its latest submission only.

    Job numbers wrap (at 10M, or when a cluster's spool is reset) while accounting keeps the old jobs: only the
    latest submission under a number is ours. All its tasks share one qsub_time."""
    by_job: dict[str, list[dict[str, str]]] = {}
    for row in rows:
        if row.get("jobnumber", "") in job_ids:
            by_job.setdefault(row["jobnumber"], []).append(row)
    latest_rows = {}
    for job_id, all_rows in by_job.items():
        latest = max(parse_qacct_time(r.get("qsub_time", "")) or _EPOCH for r in all_rows)
        latest_rows[job_id] = [r for r in all_rows if (parse_qacct_time(r.get("qsub_time", "")) or _EPOCH) == latest]
    return latest_rows


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
        if rows:
            records[scheduler_id] = _merged_record(scheduler_id, rows)
    return records
