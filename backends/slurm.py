"""Slurm: `#SBATCH` directives, `sbatch --parsable`, one `squeue` for many jobs, `sacct` for the final word.

Times are asked for as epoch seconds (SLURM_TIME_FORMAT=%s), so the cluster's time zone never matters.
Accounting is `sacct` against slurmdbd by default; `{"accounting": "jobcomp"}` reads the job-completion log
(`sacct -c`) on clusters without slurmdbd.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from backends.base import (
    SCRIPT_FILE,
    BackendError,
    JobRecord,
    JobSpec,
    JobStatus,
    Load,
    State,
)
from backends.safety import check_job_name, check_mapping
from backends.script import Dialect, hms, tasks_per_node
from backends.shell import ShellBackend
from backends.transport import CommandResult

_PENDING = {"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "RESV_DEL_HOLD", "SPECIAL_EXIT"}
_RUNNING = {"RUNNING", "COMPLETING", "SUSPENDED", "STOPPED", "RESIZING", "SIGNALING", "STAGE_OUT"}
_STATES = {
    **{s: State.PENDING for s in _PENDING},
    **{s: State.RUNNING for s in _RUNNING},
    "COMPLETED": State.COMPLETED,
    "FAILED": State.FAILED,
    "NODE_FAIL": State.FAILED,
    "BOOT_FAIL": State.FAILED,
    "OUT_OF_MEMORY": State.FAILED,
    "DEADLINE": State.TIMED_OUT,
    "PREEMPTED": State.FAILED,
    "REVOKED": State.FAILED,
    "CANCELLED": State.CANCELLED,
    "TIMEOUT": State.TIMED_OUT,
}
_CONTROLLER_UNREACHABLE = (
    "Unable to contact slurm controller", "Socket timed out on send/recv", "Zero Bytes were transmitted or received",
    "Slurm backup controller in standby mode", "Communication connection failure",
)
_ID_RE = re.compile(r"\d+(_\d+)?")
SACCT_FIELDS = "JobID,JobName,State,ExitCode,Start,End,ElapsedRaw,NNodes,AllocTRES,Account,Partition"
# The job-completion log has no TRES (and Slurm 22.05's `sacct -c` crashes when asked for AllocTRES).
JOBCOMP_FIELDS = SACCT_FIELDS.replace(",AllocTRES", "")
SCONTROL_MARK = "---kakehashi-scontrol---"
NAMES_MARK = "---kakehashi-names---"


def slurm_walltime(seconds: int) -> str:
    days, rest = divmod(int(seconds), 86400)
    return f"{days}-{hms(rest)}" if days else hms(rest)


def _epoch(value: str) -> datetime | None:
    value = value.strip()
    if not value.isdigit() or value == "0":
        return None
    return datetime.fromtimestamp(int(value), UTC)


class SlurmBackend(ShellBackend):
    kind = "slurm"
    scheduler_name = "Slurm"
    submit_program = "sbatch"
    directive_prefix = "#SBATCH"
    id_pattern = _ID_RE
    dialect = Dialect(
        hosts_command='scontrol show hostnames "$SLURM_JOB_NODELIST"',
        job_id_var="SLURM_JOB_ID",
        multi_node_prefix="srun",
        array_index_var="SLURM_ARRAY_TASK_ID",
    )
    supports_arrays = True
    element_separator = "_"
    cancel_argv = ("scancel",)
    cancel_program = "scancel"
    gone_messages = ("Invalid job id",)

    # ------------------------------------------------------------------------------------------- rendering

    def directives(self, spec: JobSpec) -> list[str]:
        res = spec.resources
        mapping = check_mapping(res.mapping)
        lines = [
            f"--job-name={check_job_name(spec.name)}",
            # %a is the element's index: each array element writes into its own directory.
            "--output=%a/stdout.log" if spec.array else "--output=stdout.log",
            "--error=%a/stderr.log" if spec.array else "--error=stderr.log",
            f"--time={slurm_walltime(spec.walltime_seconds)}",
            f"--nodes={res.nodes}",
            f"--ntasks-per-node={tasks_per_node(spec)}",
        ]
        if res.cpus_per_node:
            lines.append(f"--cpus-per-task={max(1, res.cpus_per_node // tasks_per_node(spec))}")
        if partition := mapping.get("partition") or self.settings.get("partition"):
            lines.append(f"--partition={partition}")
        if spec.group:
            lines.append(f"--account={spec.group}")
        if qos := mapping.get("qos"):
            lines.append(f"--qos={qos}")
        if gres := mapping.get("gres"):
            lines.append(f"--gres={gres}")
        elif res.gpus_per_node:
            gpu = f"gpu:{res.gpu_type}:{res.gpus_per_node}" if res.gpu_type else f"gpu:{res.gpus_per_node}"
            lines.append(f"--gres={gpu}")
        if res.memory_gb:
            lines.append(f"--mem={res.memory_gb}G")
        if constraint := mapping.get("constraint"):
            lines.append(f"--constraint={constraint}")
        if spec.array:
            lines.append(f"--array=1-{spec.array_size}")
        return [f"#SBATCH {line}" for line in lines]

    # ------------------------------------------------------------------------------------------ submitting

    def submit_command(self, spec: JobSpec) -> list[str]:
        return ["sbatch", "--parsable", SCRIPT_FILE]

    def submit_refusal(self, result: CommandResult) -> str | None:
        message = result.message
        # sbatch words a controller it cannot reach as a failed submission too ("sbatch: error: Batch job
        # submission failed: Unable to contact slurm controller"): that is an outage to wait out, not a refusal
        # of the job. A timed-out reply may even hide a submission, which the retry's look-first finds.
        if any(words in message for words in _CONTROLLER_UNREACHABLE):
            raise BackendError(f"the Slurm controller is not answering: {message}")
        if "sbatch: error" in message or "Batch job submission failed" in message:
            return _sbatch_error(message)
        return None

    def submitted_id(self, stdout: str) -> str | None:
        # "123" or "123;cluster": the id on the last line.
        return stdout.strip().splitlines()[-1].split(";")[0] if stdout.strip() else ""

    def find_lookup(self, quoted_name: str) -> str:
        # %F and the part of sacct's JobID before "_" are an array's own id ("123" of "123_4").
        return (
            f"squeue -h -t all -n {quoted_name} -o %F 2>/dev/null; "
            f"SLURM_TIME_FORMAT=%s sacct -n -X -P --name {quoted_name} -S now-30days -o JobID 2>/dev/null"
        )

    def parse_find(self, stdout: str) -> str | None:
        for line in stdout.split():
            candidate = line.split(";")[0].split("_")[0].strip()
            if _ID_RE.fullmatch(candidate):
                return candidate
        return None

    # ------------------------------------------------------------------------------------------- tracking

    def status_command(self, scheduler_ids: Sequence[str]) -> str:
        # `-t all` keeps recently finished jobs (MinJobAge) so their end is seen; `%r` is the pending reason;
        # `-r` lists an array's waiting elements one by one ("123_4", not "123_[4-10]"). One purged id makes
        # squeue refuse the whole list ("Invalid job id"): then it asks for everything, in the same round trip.
        # Times as epoch seconds: %S is a waiting job's expected start (what `squeue --start` shows), N/A if none.
        fmt = shlex.quote(_SQUEUE_FORMAT)
        return (f"export SLURM_TIME_FORMAT=%s; squeue -h -r -t all -j {','.join(scheduler_ids)} -o {fmt} "
                f"|| squeue -h -r -t all -o {fmt}")

    def parse_statuses(self, result: CommandResult, scheduler_ids: Sequence[str]) -> dict[str, JobStatus]:
        return parse_squeue(self.checked(result, "squeue"), set(scheduler_ids))

    @property
    def _jobcomp(self) -> bool:
        return self.settings.get("accounting") == "jobcomp"

    def records_command(self, scheduler_ids: Sequence[str]) -> str:
        # With the steps (no -X): a cancelled or timed-out job's allocation says "0:0", only its batch step says
        # which signal killed it ("0:15"). Then slurmctld's own word on the exit code, while it still holds the
        # job: slurmdbd 22.05 keeps only the low 7 bits of an exit code above 127 (a script's `exit 143` is
        # "15:0" in sacct, "143:0" in scontrol, verified on the test cluster).
        fields = JOBCOMP_FIELDS if self._jobcomp else SACCT_FIELDS
        ids = [i for i in scheduler_ids if _ID_RE.fullmatch(i)]
        sacct = f"SLURM_TIME_FORMAT=%s sacct {'-c ' if self._jobcomp else ''}-n -P -j {','.join(scheduler_ids)} -o {fields}"
        scontrol = "; ".join(f"scontrol -o show job {i}" for i in ids)
        # Accounting names whoever cancelled a job by uid ("CANCELLED by 0"): their login names, from the same
        # round trip, so that a history says "scancel by root" rather than a number.
        names = ("printf '%s\\n' \"$out\" | grep -o 'CANCELLED by [0-9][0-9]*' | cut -d' ' -f3 | sort -u "
                 "| xargs -r getent passwd | cut -d: -f1,3")
        return (f"out=$({sacct}) && printf '%s\\n' \"$out\" && {{ echo {SCONTROL_MARK}; {{ {scontrol or 'true'}; }} "
                f"2>/dev/null; echo {NAMES_MARK}; {{ {names}; }} 2>/dev/null; true; }}")

    def parse_records(self, result: CommandResult, scheduler_ids: Sequence[str]) -> dict[str, JobRecord]:
        fields = JOBCOMP_FIELDS if self._jobcomp else SACCT_FIELDS
        text, _, rest = self.checked(result, "sacct").partition(f"{SCONTROL_MARK}\n")
        controller, _, names = rest.partition(f"{NAMES_MARK}\n")
        return parse_sacct(text, set(scheduler_ids), fields, parse_scontrol_exit_codes(controller),
                           parse_user_names(names))

    def load_command(self, queues: Sequence[str]) -> str | None:
        # Three readings in one round trip, each after a marker: every job's state and partition (array
        # elements one by one), each node's state (a node in two partitions is listed twice), and when the
        # backfill scheduler expects each waiting job to start (epoch seconds; N/A where it has no plan yet).
        return (
            "echo @@jobs; squeue -h -r -t PD,R,CG,CF -o '%T|%P' && "
            "echo @@nodes; sinfo -h -N -o '%N|%T' && "
            "echo @@start; SLURM_TIME_FORMAT=%s squeue -h -r -t PD --start -o '%S'"
        )

    def parse_load(self, result: CommandResult) -> Load:
        return parse_slurm_load(self.checked(result, "squeue/sinfo"))


_SQUEUE_FORMAT = "%i|%T|%r|%S"


def _sections(text: str) -> dict[str, list[str]]:
    """Lines after each `@@name` marker line."""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        if line.startswith("@@"):
            current = sections.setdefault(line[2:].strip(), [])
        elif current is not None and line.strip():
            current.append(line.strip())
    return sections


def parse_slurm_load(text: str) -> Load:
    """What `load_command` printed: jobs waiting and running, idle nodes, the latest expected start."""
    sections = _sections(text)
    pending = running = 0
    per_queue: dict[str, int] = {}
    for line in sections.get("jobs", []):
        state, _, partition = line.partition("|")
        if state in _PENDING:
            pending += 1
            per_queue[partition] = per_queue.get(partition, 0) + 1
        else:
            running += 1
    nodes: dict[str, str] = {}
    for line in sections.get("nodes", []):
        name, _, state = line.partition("|")
        nodes[name] = state
    starts = [_epoch(line) for line in sections.get("start", [])]
    known = [start for start in starts if start is not None]
    return Load(
        pending=pending, running=running, total_nodes=len(nodes) if "nodes" in sections else None,
        free_nodes=sum(1 for state in nodes.values() if state == "idle") if "nodes" in sections else None,
        expected_start=max(known) if known else None, per_queue=per_queue,
    )


def parse_squeue(text: str, wanted: set[str]) -> dict[str, JobStatus]:
    """`squeue -o '%i|%T|%r|%S'` lines of the wanted jobs (%S, epoch seconds: a waiting job's expected start)."""
    statuses: dict[str, JobStatus] = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) < 3 or parts[0] not in wanted:
            continue
        job_id, raw_state, reason = parts[0], parts[1].split()[0], parts[2]
        state = _STATES.get(raw_state, State.RUNNING)
        expected = _epoch(parts[3]) if len(parts) > 3 and state == State.PENDING else None
        statuses[job_id] = JobStatus(job_id, state, "" if reason in {"None", "(null)"} else reason,
                                     expected_start=expected)
    return statuses


def parse_scontrol_exit_codes(text: str) -> dict[str, tuple[int, int]]:
    """`scontrol -o show job` lines as {job id: (exit code, signal)}, an array element under its "123_4" too."""
    codes: dict[str, tuple[int, int]] = {}
    for line in text.splitlines():
        fields = dict(item.partition("=")[::2] for item in line.split() if "=" in item)
        code, _, signal = fields.get("ExitCode", "").partition(":")
        if not (code.isdigit() and signal.isdigit()):
            continue
        if fields.get("JobId"):
            codes[fields["JobId"]] = (int(code), int(signal))
        if fields.get("ArrayJobId") and fields.get("ArrayTaskId", "").isdigit():
            codes[f"{fields['ArrayJobId']}_{fields['ArrayTaskId']}"] = (int(code), int(signal))
    return codes


def _exit_pair(text: str) -> tuple[int | None, int]:
    code, _, signal = text.partition(":")
    return (int(code) if code.isdigit() else None), (int(signal) if signal.isdigit() else 0)


def parse_user_names(text: str) -> dict[str, str]:
    """`getent passwd` lines cut to `name:uid`, as {uid: name}."""
    names = {}
    for line in text.splitlines():
        name, _, uid = line.strip().partition(":")
        if name and uid.isdigit():
            names[uid] = name
    return names


def parse_sacct(text: str, wanted: set[str], field_list: str = SACCT_FIELDS,
                controller: Mapping[str, tuple[int, int]] | None = None,
                names: Mapping[str, str] | None = None) -> dict[str, JobRecord]:
    """sacct rows (allocations and their steps) as records of the `wanted` jobs. The exit code is accounting's,
    or slurmctld's where it still knows the job (`controller`, from parse_scontrol_exit_codes); the signal is the
    allocation's, else its batch step's. Who cancelled a job is accounting's uid, named by `names` (uid → login
    name, from parse_user_names) where it can be."""
    controller, names = controller or {}, names or {}
    records: dict[str, JobRecord] = {}
    fields = field_list.split(",")
    rows: dict[str, dict[str, str]] = {}
    step_signal: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) != len(fields):
            continue
        row = dict(zip(fields, parts, strict=True))
        job_id, _, step = row["JobID"].partition(".")
        if job_id not in wanted:
            continue
        if step == "batch":
            step_signal[job_id] = _exit_pair(row["ExitCode"])[1]
        elif not step:
            rows[job_id] = row
    for job_id, row in rows.items():
        raw_state = row["State"].split()[0] if row["State"] else ""
        state = _STATES.get(raw_state)
        if state is None or not state.is_final:
            continue  # still running according to accounting: the queue is the better source
        exit_code, signal = controller.get(job_id) or _exit_pair(row["ExitCode"])
        signal = signal or step_signal.get(job_id, 0)
        if signal and not exit_code:
            exit_code = None  # killed: the script never returned a code
        reason = {
            State.TIMED_OUT: "walltime exceeded (Slurm TIMEOUT)",
            State.CANCELLED: "cancelled",
            State.FAILED: raw_state.lower().replace("_", " "),
        }.get(state, "")
        cancelled_by = ""
        if state is State.CANCELLED and (by := row["State"].partition(" by ")[2].strip()):
            cancelled_by = names.get(by) or (f"uid {by}" if by.isdigit() else by)
        elapsed = int(row["ElapsedRaw"]) if row["ElapsedRaw"].isdigit() else None
        nodes = int(row["NNodes"]) if row["NNodes"].isdigit() else None
        records[job_id] = JobRecord(
            scheduler_id=job_id,
            state=state,
            exit_code=exit_code,
            started_at=_epoch(row["Start"]),
            ended_at=_epoch(row["End"]),
            elapsed_seconds=elapsed,
            nodes=nodes,
            reason=reason,
            raw=row,
            signal=signal or None,
            cancelled_by=cancelled_by,
        )
    return records


def _sbatch_error(message: str) -> str:
    """The scheduler's own words, without the tool's prefixes."""
    lines = [line.replace("sbatch: error:", "").strip() for line in message.splitlines() if line.strip()]
    return "; ".join(lines) or message
