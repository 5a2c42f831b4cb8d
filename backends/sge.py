"""Grid Engine: `#$` directives, `qsub -terse -w e`, one `qstat -xml` for many jobs, `qacct -j` for the final
word. Tested against Son of Grid Engine 8.1.9 (the test cluster) and on what Univa/Altair Grid Engine 8.x (ABCI,
TSUBAME's product line), Open Grid Scheduler and SGE 6 printed at other sites (tests/backends/fixtures/sge).

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
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta

from backends.base import (
    SCRIPT_FILE,
    STDERR_FILE,
    STDOUT_FILE,
    BackendError,
    InvalidJobSpec,
    JobRecord,
    JobSpec,
    JobStatus,
    Load,
)
from backends.safety import check_group, check_job_name, check_mapping
from backends.script import Dialect, recorded_id_command
from backends.sge_parse import (
    is_refusal,
    parse_find,
    parse_qacct,
    parse_qstat_load,
    parse_qstat_xml,
    qsub_error,
    terse_id,
)
from backends.shell import ShellBackend
from backends.transport import CommandResult

PROFILES = ("tsubame", "abci", "generic")
# Every job the portal submits is named kh-<uuid10>-<name> (portal/jobs/specs.py scheduler_name): a qacct pattern.
PORTAL_JOB_NAMES = "kh-*"
RECENT_RECORDS_MARGIN = timedelta(hours=1)
# Profiles whose qsub takes the group as `-g GROUP` on the command line.
_COMMAND_LINE_GROUP = {"tsubame", "abci"}

# What the backend takes as an id: a job, or one task of an array job ("123.4"). They reach a shell.
_SCHEDULER_ID_RE = re.compile(r"\d+(?:\.\d+)?")
# Complex (resource) and parallel environment names: they become `-l NAME=N` / `-pe NAME N`, so no `=` or `,`
# that would smuggle in a second request.
_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")
_QUEUE_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.@*-]{0,127}")

def h_rt(seconds: int) -> str:
    hours, rest = divmod(int(seconds), 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"


def _check_name(kind: str, value: str, pattern: re.Pattern[str] = _NAME_RE) -> str:
    if not pattern.fullmatch(value):
        raise InvalidJobSpec(f"hardware mapping {kind}={value!r} is not a Grid Engine {kind} name")
    return value


class SGEBackend(ShellBackend):
    kind = "sge"
    scheduler_name = "Grid Engine"
    submit_program = "qsub"
    id_pattern = _SCHEDULER_ID_RE
    supports_arrays = True
    directive_prefix = "#$"
    element_separator = "."  # SGE's job_task notation: "qdel 123.4" deletes that task only
    cancel_argv = ("qdel",)
    cancel_program = "qdel"
    # 'job "123" task "4" does not exist' while the array lives on, 'denied: job "123" does not exist' once over.
    gone_messages = ("does not exist",)
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

    def submit_refusal(self, result: CommandResult) -> str | None:
        return qsub_error(result.message) if is_refusal(result.message) else None

    def submitted_id(self, stdout: str) -> str | None:
        return terse_id(stdout)

    def find_command(self, spec: JobSpec) -> str:
        name = shlex.quote(check_job_name(spec.name))
        # Three sources in one round trip, each after a marker line: the id the submit command wrote beside
        # the script, the queue (qstat -j takes a job name too), accounting (finished jobs).
        return (
            f"echo @@recorded; {recorded_id_command(spec.workdir)}; "
            f"echo @@queue; qstat -xml -j {name} 2>/dev/null; "
            f"echo @@accounting; qacct -j {name} 2>/dev/null | awk '$1 == \"jobnumber\" {{print $2}}'; true"
        )

    def parse_find(self, stdout: str) -> str | None:
        return parse_find(stdout)

    # ------------------------------------------------------------------------------------------- tracking

    def status_command(self, scheduler_ids: Sequence[str]) -> str:
        # qstat has no "these ids" filter short of -j (whose XML is a page per job): list every user's jobs
        # once and pick ours. Finished jobs leave the list; accounting has them.
        return "qstat -xml -u '*'"

    def parse_statuses(self, result: CommandResult, scheduler_ids: Sequence[str]) -> dict[str, JobStatus]:
        return parse_qstat_xml(self.checked(result, "qstat"), set(scheduler_ids))

    def final_records(self, scheduler_ids: Sequence[str], *,
                      submitted_since: datetime | None = None) -> dict[str, JobRecord]:
        """qacct has no index: each call reads the whole accounting file (gigabytes at a centre), and takes one job.
        Given when the earliest of these jobs was submitted, one qacct lists every portal job (named `kh-…`) that
        started since, a single read of the file for them all; only the jobs it does not list (never started,
        not written yet, a name of another shape) are then asked one by one, as without the hint."""
        ids = self.check_ids(scheduler_ids)
        jobs = dict.fromkeys(i.partition(".")[0] for i in ids)
        if submitted_since is None or len(jobs) < 2:
            return super().final_records(ids)
        found = parse_qacct(self.run(self.recent_records_command(submitted_since)).stdout, set(ids))
        missing = [i for i in ids if i not in found]
        return {**found, **(super().final_records(missing) if missing else {})}

    def recent_records_command(self, submitted_since: datetime) -> str:
        """Every portal job's records whose job started after `submitted_since` less an hour (clocks of the portal
        and the login node may differ): `-b` takes the login node's local time, UTC under TZ=UTC0. No match, or a
        qacct that cannot read its file, prints nothing here; the jobs are then asked one by one, which reports it."""
        begin = (submitted_since.astimezone(UTC) - RECENT_RECORDS_MARGIN).strftime("%Y%m%d%H%M")
        return f"TZ=UTC0 LC_ALL=C qacct -b {begin} -j {shlex.quote(PORTAL_JOB_NAMES)} 2>/dev/null; true"

    def records_command(self, scheduler_ids: Sequence[str]) -> str:
        # qacct takes one job per call: loop on the login node so it stays one SSH exec. A job's output holds
        # all its tasks' records, so elements of one array cost one qacct.
        jobs = dict.fromkeys(i.partition(".")[0] for i in scheduler_ids)
        return f'for id in {" ".join(jobs)}; do TZ=UTC0 LC_ALL=C qacct -j "$id"; done'

    def parse_records(self, result: CommandResult, scheduler_ids: Sequence[str]) -> dict[str, JobRecord]:
        # A job without a record (not flushed yet, or deleted while pending) prints "error: job id N not found".
        unexpected = [
            line
            for line in result.stderr.splitlines()
            if line.strip() and not re.fullmatch(r"error: job id \d+ not found", line.strip())
        ]
        if unexpected:
            raise BackendError(f"qacct failed: {'; '.join(unexpected)[:2000]}")
        return parse_qacct(result.stdout, set(scheduler_ids))

    # ------------------------------------------------------------------------------ how busy the cluster is

    def load_command(self, queues: Sequence[str]) -> str | None:
        # One listing of every queue instance (used/total slots, alarm states) and every user's jobs, pending
        # ones last: qstat -g c sums slots per cluster queue but cannot tell a free host from a half-used one.
        return "qstat -f -u '*'"

    def parse_load(self, result: CommandResult) -> Load:
        node_queues = self.settings.get("node_queues") or ()
        return parse_qstat_load(self.checked(result, "qstat"), [str(q) for q in node_queues])
