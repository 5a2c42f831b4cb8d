"""The one interface every job backend implements, and what the base class does for all of them.

Backends are plain Python: no Django, no portal imports. The portal never sees a transport: it asks a backend to
render, submit, find, report statuses and final records, cancel, and to list and read the files a job left, and
the backend class says how it is reached and as whom (`reach`, `connect`). See docs/decisions/0008.

The base class runs every scheduler command and checks it; an adapter supplies the command and a parser of its
output (psij-python's BatchSchedulerExecutor shape). The parsers themselves are pure functions in the adapter's
module, tested on recorded outputs. The plain data all of this speaks lives in backends/spec.py and is
re-exported here, so callers write `from backends.base import JobSpec, State`.
"""

from __future__ import annotations

import re
import shlex
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import ClassVar

from backends.safety import DIRECTIVE_PREFIXES, check_job_name, directive_lines, validate_spec
from backends.script import Dialect, assemble, recorded_id_command, render_body, staged_command, staging_archive
from backends.spec import (
    DATA_DIR,
    FINAL_STATES,
    OUTPUTS_DIR,
    PAYLOAD_FILE,
    SCRIPT_FILE,
    STDERR_FILE,
    STDOUT_FILE,
    Access,
    ArrayElement,
    BackendError,
    DataFile,
    DataInput,
    DataRefused,
    InvalidJobSpec,
    JobRecord,
    JobSpec,
    JobStatus,
    Launcher,
    Load,
    OutputListing,
    Reach,
    RemoteFile,
    Resources,
    StagingReport,
    State,
    SubmitRefused,
    element_dir,
)
from backends.staging import cache_location, check_cluster_path, stage
from backends.transport import CommandResult, SSHTransport, Transport, TransportError

__all__ = [
    "DATA_DIR", "DataFile", "DataInput", "DataRefused", "StagingReport", "FINAL_STATES", "OUTPUTS_DIR", "PAYLOAD_FILE", "SCRIPT_FILE", "STDERR_FILE", "STDOUT_FILE", "Access",
    "ArrayElement", "Backend", "BackendError", "InvalidJobSpec", "JobRecord", "JobSpec", "JobStatus", "Launcher", "Load",
    "OutputListing", "Reach", "RemoteFile", "Resources", "State", "SubmitRefused", "TransportError", "element_dir",
]

STREAM_FILES = {"stdout": STDOUT_FILE, "stderr": STDERR_FILE}
MAX_LISTED_FILES = 10_000
MAX_LISTED_DEPTH = 32


class Backend(ABC):
    """One adapter per scheduler (or cloud service) behind this interface."""

    kind: ClassVar[str]
    # How the portal reaches this backend and as whom its jobs run (backends.spec.Reach).
    reach: ClassVar[Reach] = Reach.LOGIN_NODE
    # Whether the portal may submit a sweep as one scheduler array (`element_id` and per-element ids in
    # `statuses`, `final_records` and `cancel` work); otherwise a sweep is submitted job by job.
    supports_arrays: ClassVar[bool] = False
    # Prefix of the lines this scheduler reads as options ("#SBATCH", "#PBS", "#$"), or "" if none.
    directive_prefix: ClassVar[str] = ""
    # The three facts about the scheduler's job environment that the shared script body needs.
    dialect: ClassVar[Dialect]
    # What one of this scheduler's job ids looks like: checked before any id reaches a shell, and in what a submit
    # printed. None where an adapter checks its ids its own way (the local runner's id is its job directory).
    id_pattern: ClassVar[re.Pattern[str] | None] = None
    # How the scheduler is called in messages ("Slurm", "Grid Engine").
    scheduler_name: ClassVar[str] = ""
    # The submit command as messages name it ("sbatch", "qsub").
    submit_program: ClassVar[str] = ""
    # Seconds the submit command may take, if not the transport's own timeout.
    submit_timeout: ClassVar[float | None] = None
    # The scheduler's cancel command (before the id), and what it says of a job that already ended.
    cancel_argv: ClassVar[tuple[str, ...]] = ()
    gone_messages: ClassVar[tuple[str, ...]] = ()
    # An array element's id: the array's id, this separator, the element's index ("123_4", "123.4").
    element_separator: ClassVar[str] = ""

    def __init__(self, transport: Transport | None, settings: Mapping[str, object] | None = None) -> None:
        # None: a renderer only (pure, safe inside a web request); every command needs a transport.
        self.transport = transport
        self.settings = dict(settings or {})

    @classmethod
    def connect(cls, access: Access, settings: Mapping[str, object] | None = None) -> Backend:
        """This backend reaching its cluster as `access` says. The default: SSH to the login node."""
        transport = SSHTransport(access.host, access.port, access.username, access.private_key, access.known_hosts,
                                 timeout=access.timeout)
        return cls(transport, settings)

    @classmethod
    def job_dir(cls, work_root: str, name: str) -> str:
        """Where a job named `name` keeps its files: relative to the account's home, or absolute."""
        return f"{work_root.rstrip('/')}/{name}"

    # ------------------------------------------------------------------------------------------- rendering

    @abstractmethod
    def directives(self, spec: JobSpec) -> list[str]:
        """The scheduler directive lines for this job (validated; nothing user-typed unchecked)."""

    def render(self, spec: JobSpec) -> str:
        """The exact job script that `submit` will hand to the scheduler."""
        validate_spec(spec)
        return assemble("#!/bin/bash", self.directives(spec), render_body(spec, self.dialect))

    @abstractmethod
    def submit_command(self, spec: JobSpec) -> list[str]:
        """The submit command as run in the job directory (shown to the user beside the script: some options,
        like TSUBAME/ABCI's `-g GROUP`, live on the command line, not in the script)."""

    def directive_lines(self, script: str) -> list[str]:
        """Every line of `script` a scheduler could take as an option: this backend's own and every other
        scheduler's, since a script may pass through more than one (the Torque wrappers hand it to sbatch).
        The portal refuses an edited script whose directive lines differ from the rendered one's."""
        prefixes = dict.fromkeys(p for p in (self.directive_prefix, *DIRECTIVE_PREFIXES) if p)
        return [line for prefix in prefixes for line in directive_lines(script, prefix)]

    # --------------------------------------------------------- the scheduler's commands, supplied by adapters

    def submit_shell(self, spec: JobSpec) -> str:
        """The shell line that stages the job directory from stdin and submits it (see script.staged_command)."""
        return staged_command(spec.workdir, shlex.join(self.submit_command(spec)))

    def staging_archive(self, spec: JobSpec, script: str) -> bytes:
        """The job directory's inputs, sent on the submit command's stdin."""
        return staging_archive(spec, script)

    def parse_submit(self, result: CommandResult) -> str | None:
        """The job id the submit command printed ("" or None if none: `submit` checks it against `id_pattern`);
        SubmitRefused with the scheduler's own words (`submit_refusal`) for a job it will never take, BackendError
        for a failure that may pass."""
        if not result.ok:
            refusal = self.submit_refusal(result)
            if refusal:
                raise SubmitRefused(refusal)
            raise BackendError(f"{self.submit_program} failed (exit {result.exit_status}): {result.message}")
        return self.submitted_id(result.stdout)

    def submit_refusal(self, result: CommandResult) -> str | None:
        """What the scheduler said when it will never take this job, from a failed submit; None when the failure
        may pass (BackendError may be raised for one with words of its own)."""
        return None

    def submitted_id(self, stdout: str) -> str | None:
        """The job id in what a successful submit printed: by default its last line that is not blank."""
        lines = [line.strip() for line in stdout.splitlines() if line.strip()]
        return lines[-1] if lines else ""

    def find_command(self, spec: JobSpec) -> str:
        """A command that prints what is known of a job of this spec's name: the id the submit command recorded
        in the job directory, then the queue's and accounting's (`find_lookup`); it never fails."""
        lookup = self.find_lookup(shlex.quote(check_job_name(spec.name)))
        return f"{recorded_id_command(spec.workdir)}; {lookup}; true"

    def find_lookup(self, quoted_name: str) -> str:
        """A command printing the ids of this user's jobs of exactly this (quoted) name, queued or finished."""
        raise NotImplementedError

    @abstractmethod
    def parse_find(self, stdout: str) -> str | None:
        """The id `find_command` found, or None."""

    @abstractmethod
    def status_command(self, scheduler_ids: Sequence[str]) -> str:
        """One command asking the queue about all these (checked) ids."""

    @abstractmethod
    def parse_statuses(self, result: CommandResult, scheduler_ids: Sequence[str]) -> dict[str, JobStatus]:
        """What the queue said; jobs it no longer knows are absent. BackendError if it could not be asked."""

    @abstractmethod
    def records_command(self, scheduler_ids: Sequence[str]) -> str:
        """One command asking accounting about all these (checked) ids."""

    @abstractmethod
    def parse_records(self, result: CommandResult, scheduler_ids: Sequence[str]) -> dict[str, JobRecord]:
        """Final records of finished jobs; jobs accounting does not (yet) know are absent."""

    def load_command(self, queues: Sequence[str]) -> str | None:
        """One command that asks how busy the cluster is (queue and nodes); None if this backend cannot tell."""
        return None

    def parse_load(self, result: CommandResult) -> Load:
        """What `load_command` printed; BackendError if the scheduler could not be asked."""
        raise NotImplementedError

    def cancel_command(self, scheduler_id: str) -> str:
        """The command that asks the scheduler to stop this (checked) job."""
        return shlex.join([*self.cancel_argv, scheduler_id])

    def cancel_gone(self, result: CommandResult) -> bool:
        """Whether a failed cancel only says the job already ended (not an error)."""
        return any(message in result.message for message in self.gone_messages)

    # ------------------------------------------------------------------------- what the base does with them

    def run(self, command: str, *, stdin: bytes | None = None, timeout: float | None = None) -> CommandResult:
        """Run one command where the backend's jobs run: the one place a command leaves the backend."""
        if self.transport is None:
            raise BackendError(f"this {self.kind} backend only renders scripts: it has no connection")
        return self.transport.run_shell(command, stdin=stdin, timeout=timeout)

    @staticmethod
    def checked(result: CommandResult, what: str) -> str:
        """The output of a command that succeeded; BackendError saying what failed otherwise."""
        if not result.ok:
            raise BackendError(f"{what} failed: {result.message}")
        return result.stdout

    def check_ids(self, scheduler_ids: Sequence[str]) -> list[str]:
        """The ids, each once, if each looks like one of this scheduler's; BackendError otherwise."""
        bad = [i for i in scheduler_ids if not isinstance(i, str) or not self.id_pattern.fullmatch(i)]
        if bad:
            raise BackendError(f"not {self.scheduler_name or self.kind} job ids: {bad!r}")
        return list(dict.fromkeys(scheduler_ids))

    def submit(self, spec: JobSpec, script: str | None = None) -> str:
        """Submit and return the scheduler's job id. `script` overrides `render(spec)` (already validated)."""
        script = script if script is not None else self.render(spec)
        result = self.run(self.submit_shell(spec), stdin=self.staging_archive(spec, script), timeout=self.submit_timeout)
        job_id = self.parse_submit(result)
        if self.id_pattern is not None and not (job_id and self.id_pattern.fullmatch(job_id)):
            raise BackendError(f"{self.submit_program} printed no job id: {result.stdout!r}")
        return job_id

    def find(self, spec: JobSpec) -> str | None:
        """The id of this job if an earlier attempt already submitted it, else None.

        Looks at the id the submit command recorded in the job directory, then asks the scheduler (queue and
        accounting) for a job with exactly this name. This is what makes a retried submit never a second job.
        """
        return self.parse_find(self.run(self.find_command(spec)).stdout)

    def statuses(self, scheduler_ids: Sequence[str]) -> dict[str, JobStatus]:
        """Status of many jobs in one scheduler call. Jobs the queue no longer knows are absent."""
        ids = self.check_ids(scheduler_ids)
        if not ids:
            return {}
        return self.parse_statuses(self.run(self.status_command(ids)), ids)

    def final_records(self, scheduler_ids: Sequence[str], *,
                      submitted_since: datetime | None = None) -> dict[str, JobRecord]:
        """Accounting records of finished jobs, in one scheduler call. Jobs accounting does not (yet) know are
        absent. `submitted_since` (none of them was submitted earlier) lets a scheduler whose accounting has no
        index read less of it (Grid Engine); others ignore it."""
        ids = self.check_ids(scheduler_ids)
        if not ids:
            return {}
        return self.parse_records(self.run(self.records_command(ids)), ids)

    def cancel(self, scheduler_id: str) -> None:
        """Ask the scheduler to stop the job. Cancelling a job that already ended is not an error."""
        (job_id,) = self.check_ids([scheduler_id])
        result = self.run(self.cancel_command(job_id))
        if not result.ok and not self.cancel_gone(result):
            raise BackendError(f"cancelling job {job_id} failed (exit {result.exit_status}): {result.message}")

    def load(self, queues: Sequence[str] = ()) -> Load:
        """How busy the cluster is now: jobs waiting and running, free nodes, when the waiting ones should start
        (where the scheduler says). `queues` narrows it to the portal's own queues where a backend has many."""
        command = self.load_command(queues)
        if command is None:
            return Load()
        return self.parse_load(self.run(command, timeout=60))

    def element_id(self, array_id: str, index: int) -> str:
        """The scheduler's id of one element of the array `array_id` (as `submit` returned it)."""
        if not self.supports_arrays:
            raise NotImplementedError(f"{self.kind} does not submit arrays")
        return f"{array_id}{self.element_separator}{index}"

    # ------------------------------------------------------------------------------------------ datasets

    def stage_data(self, spec: JobSpec, project: str, datasets: Sequence[DataInput], *,
                   heartbeat: Callable[[], None] | None = None) -> tuple[JobSpec, StagingReport]:
        """Make each dataset readable at `<job dir>/data/<name>` before `submit` (backends/staging.py): object-store
        files copied into the cluster's per-project cache unless already there (by SHA-256; shared by the project's
        group where the cluster's `data_cache` names `{group}`, else the account's own), registered paths
        linked in place. Returns the spec to submit. Idempotent, so a retried dispatch copies nothing twice.
        DataRefused for a dataset this job can never have; BackendError/TransportError for what may pass.
        `heartbeat` is called every few seconds while bytes move (the dispatch worker renews its lease)."""
        if self.transport is None:
            raise BackendError(f"this {self.kind} backend only renders scripts: it has no connection")
        cache_root, group = cache_location(str(self.settings.get("data_cache") or ""), spec.group)
        return spec, stage(self.transport, spec.workdir, project, datasets, cache_root=cache_root, group=group,
                           heartbeat=heartbeat)

    def check_data_path(self, path: str, root: str) -> str:
        """The resolved `path` if it lies inside `root` and this account can read it (a registered dataset is
        checked as whoever registers it); DataRefused saying why not."""
        result = self.run(check_cluster_path(path, root), timeout=120)
        if result.exit_status == 4:
            raise DataRefused(result.stdout.strip() or result.message)
        return self.checked(result, f"checking {path}").strip()

    def stream_file(self, workdir: str, path: str):
        """The bytes of a file the job wrote (relative to its directory), a chunk at a time."""
        if self.transport is None:
            raise BackendError(f"this {self.kind} backend only renders scripts: it has no connection")
        return self.transport.read_stream(f"{workdir.rstrip('/')}/{path}")

    # ------------------------------------------------------------------------------------- a job's files

    def read_file(self, workdir: str, path: str, *, offset: int = 0, limit: int = 1 << 20) -> bytes:
        """Bytes of a file the job wrote, `path` relative to its job directory; b"" if it does not exist (yet)."""
        if self.transport is None:
            raise BackendError(f"this {self.kind} backend only renders scripts: it has no connection")
        return self.transport.read_file(f"{workdir.rstrip('/')}/{path}", offset=offset, limit=limit)

    def read_output(self, workdir: str, stream: str, offset: int = 0, limit: int = 1 << 20) -> bytes:
        """Part of a job's stdout or stderr; empty if the file does not exist yet."""
        return self.read_file(workdir, STREAM_FILES[stream], offset=offset, limit=limit)

    def list_outputs(self, workdir: str, *, limit: int = MAX_LISTED_FILES,
                     depth: int = MAX_LISTED_DEPTH) -> OutputListing:
        """What the job left in its outputs/ directory (`depth` levels deep, at most `limit` entries), paths
        relative to it. Read a file with `read_file(workdir, f"outputs/{path}")` or `stream_file`.

        Symbolic links are listed as not files and never followed (find's default): neither outputs/ itself nor
        a folder under it that is a link is entered. Names may hold any byte but "/" and NUL: find ends each entry
        with NUL and `tr` swaps NUL and newline, so an entry is a line for `head` however it is named (a newline
        inside a name travels as NUL; `parse_listing` swaps it back). `head -z` would do without the swap but is
        missing from coreutils before 8.25 (RHEL 7 login nodes)."""
        limit, depth = int(limit), int(depth)
        outputs = shlex.quote(f"{workdir.rstrip('/')}/{OUTPUTS_DIR}")
        listing = self.run(
            f"[ -L {outputs} ] && echo L; "
            f"find {outputs} -mindepth 1 -maxdepth {depth} ! -type d -printf '%y\\t%s\\t%P\\0' 2>/dev/null "
            f"| tr '\\0\\n' '\\n\\0' | head -n {limit + 1}; "
            f"find {outputs} -mindepth {depth + 1} ! -type d -printf 'D\\n' -quit 2>/dev/null; true",
            timeout=300)
        return parse_listing(listing.stdout, limit)

    def whoami(self) -> str:
        """The name the backend acts as on the cluster (what a linked account's key logs in as)."""
        result = self.run(shlex.join(["id", "-un"]), timeout=30)
        if not result.ok:
            raise BackendError(result.message or f"id -un exited {result.exit_status}")
        return result.stdout.strip()

    def close(self) -> None:
        """Drop the connection underneath (a pooled SSH connection is otherwise kept for the next caller)."""
        if self.transport is not None:
            self.transport.close()


def parse_listing(stdout: str, limit: int = MAX_LISTED_FILES) -> OutputListing:
    """What `list_outputs`' command printed, a line each: `type TAB size TAB path` as find's `%y\\t%s\\t%P` (type "f"
    a regular file; a newline in the path arrives as NUL), "L" (outputs/ is a symbolic link) or "D" (something
    lies deeper than listed). More than `limit` entries: the first `limit`, and `more`."""
    files, not_files, flags, entries = [], [], set(), 0
    for line in stdout.split("\n"):
        if line in ("L", "D"):
            flags.add(line)
            continue
        kind, _, rest = line.partition("\t")
        size, _, path = rest.partition("\t")
        if not kind or not size.isdigit() or not path:
            continue
        entries += 1
        if entries > limit:
            flags.add("more")
            continue
        path = path.replace("\0", "\n")
        if kind == "f":
            files.append(RemoteFile(path, int(size)))
        else:
            not_files.append(path)
    return OutputListing(files, not_files, more="more" in flags, deeper="D" in flags, outputs_link="L" in flags)
