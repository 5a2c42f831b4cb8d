"""What PBS Professional / OpenPBS and Torque share: the submit path, the job-directory index, one query for
queue and exit files, and the way a job killed by the scheduler is told apart. Each dialect (backends/pbspro.py,
backends/torque.py) supplies its directives, its `qstat` and how it reads a job's attributes; backends/pbs.py
picks the dialect from a cluster's settings; what both read alike is in backends/pbs_parse.py.

The exit status the scheduler may not keep is kept by the job itself: every script writes
`kakehashi-exit-status` into its job directory (backends/script.py), and the submit command links the job
directory under the scheduler's id in an index on the login node (`~/.kakehashi/pbs-jobs/<id>`). So one shell
command answers for many jobs: `qstat` for all of them, then the exit file of each. A job killed by the
scheduler (qdel, walltime) never writes the file; it is told apart by what is known for certain: it never
started (deleted from the queue), it ran for its whole walltime (timed out), Kakehashi asked to cancel it
(`cancel()` leaves a marker beside the exit file), or else it failed without an exit code. The elements of an
array share one directory, so arrays are not indexed (and a sweep on PBS is submitted job by job).

Times are printed with ctime() in the login node's zone: every query runs under TZ=UTC0, so they are UTC.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import ClassVar

from backends.base import (
    SCRIPT_FILE,
    InvalidJobSpec,
    JobRecord,
    JobSpec,
    JobStatus,
    Launcher,
    Load,
)
from backends.pbs_parse import IndexEntry, Observation, parse_pbs_load, parse_query, submit_error
from backends.safety import check_job_name, check_mapping, check_path
from backends.script import Dialect
from backends.shell import ShellBackend
from backends.transport import CommandResult

EXIT_FILE = "kakehashi-exit-status"
CANCEL_FILE = "kakehashi-cancel-requested"
DEFAULT_INDEX_DIR = ".kakehashi/pbs-jobs"
INDEX_KEEP_DAYS = 60

# "36" (slurm-wlm-torque), "1234.server" (PBS Pro, Torque), "1234[].server" (array), "1234[7].server" (subjob).
_ID_RE = re.compile(r"\d+(\[\d*\])?(\.[A-Za-z0-9][A-Za-z0-9._-]*)?")
# A PBS destination: queue, or queue@server.
_QUEUE_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}(@[A-Za-z0-9][A-Za-z0-9_.-]{0,127})?")
# What qdel says about a job that is already gone (the wrappers say nothing at all).
_GONE_RE = re.compile(
    r"Unknown Job Id|Job has finished|Invalid state|Request invalid for state of job|already (completed|finished)",
    re.IGNORECASE,
)


def _checked(kind: str, value: str, pattern: re.Pattern[str]) -> str:
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise InvalidJobSpec(f"{kind} {value!r} is not allowed in a PBS directive")
    return value


# ------------------------------------------------------------------------------------------------- backend


class PBSBase(ShellBackend):
    """The PBS backend without its dialect. Construct `backends.pbs.PBSBackend`, which picks one."""

    kind = "pbs"
    cancel_program = "qdel"
    scheduler_name = "PBS"
    submit_program = "qsub"
    directive_prefix = "#PBS"
    id_pattern = _ID_RE
    dialect = Dialect(
        # One line per CPU (Torque) or MPI process (PBS Pro); render_body keeps each host once.
        hosts_command='cat "$PBS_NODEFILE"',
        job_id_var="PBS_JOBID",
        # PBS Pro and Torque start a job in the home directory, not where it was submitted.
        enter_dir='cd "${PBS_O_WORKDIR:-$PWD}" || exit 1',
    )
    # The dialect's name (settings["dialect"]) and the option that carries the group when not set otherwise.
    flavour: ClassVar[str]
    default_account_option: ClassVar[str]
    # The dialect's full listing of jobs by id (finished ones too, where it keeps them), and its parser:
    # the output as {job id: {attribute: value}}.
    qstat: ClassVar[str]
    parse_qstat: ClassVar[Callable[[str], dict[str, dict[str, str]]]]

    def __init__(self, transport, settings: Mapping[str, object] | None = None) -> None:
        super().__init__(transport, settings)
        self.account_option = str(self.settings.get("account_option") or self.default_account_option)
        if self.account_option not in ("-A", "-P"):
            raise ValueError(f"account_option must be -A or -P, not {self.account_option!r}")
        queue = str(self.settings.get("queue") or "")
        if queue and not _QUEUE_RE.fullmatch(queue):
            raise ValueError(f"queue {queue!r} is not a PBS destination")
        self.queue = queue
        self.grace_seconds = int(self.settings.get("exit_status_grace_seconds", 30))
        index_dir = str(self.settings.get("index_dir") or DEFAULT_INDEX_DIR)
        check_path(index_dir, what="index_dir")
        self.index_dir = index_dir

    # ------------------------------------------------------------------- what a dialect supplies

    def resource_directives(self, spec: JobSpec, mapping: Mapping[str, str]) -> list[str]:
        """The dialect's resource request (`select=` or `nodes=`) and walltime."""
        raise NotImplementedError

    def output_directives(self) -> list[str]:
        """Directives for where stdout/stderr go, for a dialect that honours them in the script."""
        return []

    def judge(self, job_id: str, attributes: Mapping[str, str], entry: IndexEntry | None,
              now: datetime | None) -> Observation:
        """One listed job as the dialect reads it."""
        raise NotImplementedError

    # ------------------------------------------------------------------------------------------- rendering

    def directives(self, spec: JobSpec) -> list[str]:
        name = check_job_name(spec.name)
        mapping = check_mapping(spec.resources.mapping)
        lines = [f"-N {name}", "-S /bin/bash", *self.resource_directives(spec, mapping)]
        if spec.group:
            lines.append(f"{self.account_option} {spec.group}")
        queue = mapping.get("queue") or self.queue
        if queue:
            lines.append(f"-q {_checked('queue', queue, _QUEUE_RE)}")
        lines += self.output_directives()
        if spec.array:
            # Subjob ids, per-subjob output paths and accounting differ between PBS Pro and Torque and could
            # only be checked against recorded output here: a sweep on PBS is submitted job by job.
            raise InvalidJobSpec("PBS arrays are not submitted by Kakehashi; a sweep runs as separate jobs")
        return [f"#PBS {line}" for line in lines]

    @staticmethod
    def _cpus(spec: JobSpec) -> int:
        cpus = max(spec.resources.cpus_per_node, 1)
        return max(cpus, spec.procs) if spec.launcher == Launcher.MPIRUN else cpus

    # ------------------------------------------------------------------------------------------ submitting

    def _index(self) -> str:
        """The index directory as a shell word (the login node's $HOME expands there, never here)."""
        if self.index_dir.startswith("/"):
            return shlex.quote(self.index_dir.rstrip("/"))
        return '"$HOME"/' + shlex.quote(self.index_dir.removeprefix("~/").rstrip("/"))

    def submit_command(self, spec: JobSpec | None = None) -> list[str]:
        return ["qsub", SCRIPT_FILE]

    def submit_shell(self, spec: JobSpec) -> str:
        index = self._index()
        # After the job id is known: link the job directory under it, so a query that knows only ids finds the
        # exit file. Best effort, and never for an "id" that is not one plain word.
        link = (
            f'{{ {{ case "$out" in ""|*[!]A-Za-z0-9._[-]*) false;; esac && mkdir -p {index} && '
            f'ln -sfn -- "$PWD" {index}/"$out" && '
            f"find {index} -maxdepth 1 -type l -mtime +{INDEX_KEEP_DAYS} -delete; }} 2>/dev/null || true; }}"
        )
        return f"{super().submit_shell(spec)} && {link}"

    def parse_submit(self, result: CommandResult) -> str | None:
        if not result.ok:  # qsub's words may be on stdout too (the slurm-wlm-torque wrapper's)
            raise submit_error(result.exit_status, result.stdout, result.stderr)
        return super().parse_submit(result)

    def parse_find(self, stdout: str) -> str | None:
        for line in stdout.split():
            if _ID_RE.fullmatch(line.strip()):
                return line.strip()
        return None

    def cancel_command(self, scheduler_id: str) -> str:
        quoted = shlex.quote(scheduler_id)
        # The marker goes first: once qdel has killed the job, nothing else will say that this was a cancel.
        return (
            f'd={self._index()}/{quoted}; if [ -d "$d/" ]; then date +%s > "$d/{CANCEL_FILE}"; fi 2>/dev/null; '
            f"qdel {quoted}"
        )

    def cancel_gone(self, result: CommandResult) -> bool:
        # The wrappers say nothing at all about a job that is already gone.
        return not result.message or bool(_GONE_RE.search(result.message))

    # ------------------------------------------------------------------------------------------- tracking

    def query_command(self, ids: Sequence[str]) -> str:
        """qstat for all these jobs, then the exit file and cancel marker of each: one round trip."""
        quoted = " ".join(shlex.quote(i) for i in ids)
        return (
            f"TZ=UTC0 {self.qstat} {quoted}; rc=$?; "
            "printf '\\n#kakehashi-qstat-rc %s\\n#kakehashi-now %s\\n' \"$rc\" \"$(date +%s)\"; "
            f"for id in {quoted}; do d={self._index()}/\"$id\"; [ -d \"$d/\" ] || continue; "
            f"s=$(head -c 32 \"$d/{EXIT_FILE}\" 2>/dev/null | tr -dc 0-9-); "
            f"t=$(stat -c %Y \"$d/{EXIT_FILE}\" 2>/dev/null); c=0; [ -e \"$d/{CANCEL_FILE}\" ] && c=1; "
            "printf '#kakehashi-job %s %s %s %s\\n' \"$id\" \"${s:--}\" \"${t:--}\" \"$c\"; done"
        )

    def observe(self, result: CommandResult, ids: Sequence[str]) -> dict[str, Observation]:
        """Everything one query said about these jobs: the queue, the history, and each job directory."""
        return parse_query(ids, result.stdout, result.stderr, result.exit_status, self.parse_qstat, self.judge)

    def status_command(self, scheduler_ids: Sequence[str]) -> str:
        return self.query_command(scheduler_ids)

    def parse_statuses(self, result: CommandResult, scheduler_ids: Sequence[str]) -> dict[str, JobStatus]:
        return {i: o.status() for i, o in self.observe(result, scheduler_ids).items() if o.listed}

    def records_command(self, scheduler_ids: Sequence[str]) -> str:
        return self.query_command(scheduler_ids)

    def parse_records(self, result: CommandResult, scheduler_ids: Sequence[str]) -> dict[str, JobRecord]:
        return {i: o.record() for i, o in self.observe(result, scheduler_ids).items() if o.state.is_final}

    # ------------------------------------------------------------------------------ how busy the cluster is

    def load_command(self, queues: Sequence[str]) -> str | None:
        # The job table, then the nodes. Torque's qstat (and the wrappers) exit 153 for an empty table.
        return (
            "qstat; rc=$?; [ $rc = 0 ] || [ $rc = 153 ] || exit $rc; "
            'nodes=$(pbsnodes -a 2>&1); echo "@@nodes $?"; echo "$nodes"'
        )

    def parse_load(self, result: CommandResult) -> Load:
        return parse_pbs_load(self.checked(result, "qstat"))
