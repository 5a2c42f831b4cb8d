"""The skeleton of every backend reached through a shell (SSH to a login node, or the portal host itself).

It runs every scheduler command and checks it; an adapter supplies the command and a parser of its output
(psij-python's BatchSchedulerExecutor shape): `status_command` + `parse_statuses`, `records_command` +
`parse_records`, and so on. The parsers themselves are pure functions in the adapter's module, tested on recorded
outputs. Datasets are staged and a job's files listed and read through the same connection (SFTP, tar streams).
Slurm, PBS, Grid Engine and the local runner inherit it; a backend with no shell (AWS Batch) does not.
"""

from __future__ import annotations

import shlex
from abc import abstractmethod
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import ClassVar

from backends import cache
from backends.base import Backend
from backends.cache import CacheEntry
from backends.forward import Forward
from backends.listing import MAX_LISTED_DEPTH, MAX_LISTED_FILES, listing_command, parse_listing
from backends.safety import check_job_name
from backends.sampling import Chunk, FetchRequest, fetch_command, parse_fetch
from backends.script import recorded_id_command, staged_command, staging_archive
from backends.spec import (
    STDERR_FILE,
    STDOUT_FILE,
    Access,
    BackendError,
    DataInput,
    DataRefused,
    JobRecord,
    JobSpec,
    JobStatus,
    Load,
    OutputListing,
    StagingReport,
    SubmitRefused,
)
from backends.staging import cache_location, check_cluster_path, stage
from backends.staging_pull import PULL_VALUE
from backends.transport import CommandResult, SSHTransport

STREAM_FILES = {"stdout": STDOUT_FILE, "stderr": STDERR_FILE}


class ShellBackend(Backend):
    """A scheduler reached through a shell: the command/parser skeleton."""

    # The submit command as messages name it ("sbatch", "qsub").
    submit_program: ClassVar[str] = ""
    # Seconds the submit command may take, if not the transport's own timeout.
    submit_timeout: ClassVar[float | None] = None
    # The scheduler's cancel command (before the id), and what it says of a job that already ended.
    cancel_argv: ClassVar[tuple[str, ...]] = ()
    gone_messages: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def connect(cls, access: Access, settings: Mapping[str, object] | None = None) -> Backend:
        """This backend reaching its cluster as `access` says. The default: SSH to the login node."""
        settings = dict(settings or {})
        try:
            transport = SSHTransport(access.host, access.port, access.username, access.private_key,
                                     access.known_hosts, timeout=access.timeout,
                                     bulk=str(settings.get("ssh_bulk") or ""),
                                     ciphers=str(settings.get("ssh_ciphers") or ""))
        except ValueError as exc:  # the cluster's options, as a site admin typed them
            raise BackendError(f"the cluster's SSH options cannot be used: {exc}") from None
        return cls(transport, settings)

    # ------------------------------------------- the scheduler's commands, supplied by adapters

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

    # --------------------------------------------------------- what the skeleton does with them

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

    def submit(self, spec: JobSpec, script: str | None = None) -> str:
        script = script if script is not None else self.render(spec)
        result = self.run(self.submit_shell(spec), stdin=self.staging_archive(spec, script), timeout=self.submit_timeout)
        job_id = self.parse_submit(result)
        if self.id_pattern is not None and not (job_id and self.id_pattern.fullmatch(job_id)):
            raise BackendError(f"{self.submit_program} printed no job id: {result.stdout!r}")
        return job_id

    def find(self, spec: JobSpec) -> str | None:
        return self.parse_find(self.run(self.find_command(spec)).stdout)

    def statuses(self, scheduler_ids: Sequence[str]) -> dict[str, JobStatus]:
        ids = self.check_ids(scheduler_ids)
        if not ids:
            return {}
        return self.parse_statuses(self.run(self.status_command(ids)), ids)

    def final_records(self, scheduler_ids: Sequence[str], *,
                      submitted_since: datetime | None = None) -> dict[str, JobRecord]:
        ids = self.check_ids(scheduler_ids)
        if not ids:
            return {}
        return self.parse_records(self.run(self.records_command(ids)), ids)

    def cancel(self, scheduler_id: str) -> None:
        (job_id,) = self.check_ids([scheduler_id])
        result = self.run(self.cancel_command(job_id))
        if not result.ok and not self.cancel_gone(result):
            raise BackendError(f"cancelling job {job_id} failed (exit {result.exit_status}): {result.message}")

    def load(self, queues: Sequence[str] = ()) -> Load:
        command = self.load_command(queues)
        if command is None:
            return Load()
        return self.parse_load(self.run(command, timeout=60))

    # --------------------------------------------------------------------------------- datasets

    def stage_data(self, spec: JobSpec, project: str, datasets: Sequence[DataInput], *,
                   heartbeat: Callable[[], None] | None = None) -> tuple[JobSpec, StagingReport]:
        if self.transport is None:
            raise BackendError(f"this {self.kind} backend only renders scripts: it has no connection")
        cache_root, group = cache_location(str(self.settings.get("data_cache") or ""), spec.group)
        pull = self.settings.get("data_pull") == PULL_VALUE
        streams = self.settings.get("ssh_streams") or 0
        if isinstance(streams, bool) or not isinstance(streams, int) or not 0 <= streams <= 16:
            raise BackendError(f"the cluster option ssh_streams must be a whole number from 1 to 16, not {streams!r}")
        return spec, stage(self.transport, spec.workdir, project, datasets, cache_root=cache_root, group=group,
                           heartbeat=heartbeat, pull=pull, streams=streams)

    def cache_entries(self, project: str, group: str = "") -> list[CacheEntry]:
        if self.transport is None:
            raise BackendError(f"this {self.kind} backend only renders scripts: it has no connection")
        cache_root, _ = cache_location(str(self.settings.get("data_cache") or ""), group)
        return cache.entries(self.transport, cache_root, project)

    def prune_cache(self, project: str, shas: Sequence[str], group: str = "") -> int:
        if self.transport is None:
            raise BackendError(f"this {self.kind} backend only renders scripts: it has no connection")
        cache_root, _ = cache_location(str(self.settings.get("data_cache") or ""), group)
        return cache.remove(self.transport, cache_root, project, shas)

    def check_data_path(self, path: str, root: str) -> str:
        """The resolved `path` if it lies inside `root` and this account can read it (a registered dataset is
        checked as whoever registers it); DataRefused saying why not."""
        result = self.run(check_cluster_path(path, root), timeout=120)
        if result.exit_status == 4:
            raise DataRefused(result.stdout.strip() or result.message)
        return self.checked(result, f"checking {path}").strip()

    def stream_file(self, workdir: str, path: str):
        if self.transport is None:
            raise BackendError(f"this {self.kind} backend only renders scripts: it has no connection")
        return self.transport.read_stream(f"{workdir.rstrip('/')}/{path}")

    # ---------------------------------------------------------------------------- a job's files

    def read_samples(self, requests: Sequence[FetchRequest], limit: int = 256 * 1024) -> dict[str, dict[str, Chunk]]:
        """New sampler bytes of many jobs in one command (backends/sampling.py). The command goes on the shell's
        stdin, not its argument list: a cycle of 1,000 jobs is a 200 kB script, and Linux refuses an argument
        over 128 kB ("Argument list too long"), which would leave every job of a big site without samples. Its
        own stdin is /dev/null, so nothing in it can read the rest of the script."""
        if self.transport is None or not requests:
            return {}
        script = f"{{\n{fetch_command(requests, limit)}\n}} </dev/null\n"
        return parse_fetch(self.checked(self.run("sh -s", stdin=script.encode(), timeout=120), "reading samples"))

    def read_file(self, workdir: str, path: str, *, offset: int = 0, limit: int = 1 << 20) -> bytes:
        if self.transport is None:
            raise BackendError(f"this {self.kind} backend only renders scripts: it has no connection")
        return self.transport.read_file(f"{workdir.rstrip('/')}/{path}", offset=offset, limit=limit)

    def read_output(self, workdir: str, stream: str, offset: int = 0, limit: int = 1 << 20) -> bytes:
        return self.read_file(workdir, STREAM_FILES[stream], offset=offset, limit=limit)

    def list_outputs(self, workdir: str, *, limit: int = MAX_LISTED_FILES,
                     depth: int = MAX_LISTED_DEPTH) -> OutputListing:
        listing = self.run(listing_command(workdir, int(limit), int(depth)), timeout=300)
        return parse_listing(listing.stdout, int(limit))

    def forward(self, host: str, port: int, *, bind_host: str = "127.0.0.1", bind_port: int = 0) -> Forward:
        transport = self.transport
        if transport is None:
            raise BackendError(f"this {self.kind} backend only renders scripts: it has no connection")
        target = (str(host), int(port))
        return Forward(lambda: transport.open_stream(*target), target, bind_host=bind_host, bind_port=bind_port)

    def whoami(self) -> str:
        result = self.run(shlex.join(["id", "-un"]), timeout=30)
        if not result.ok:
            raise BackendError(result.message or f"id -un exited {result.exit_status}")
        return result.stdout.strip()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
