"""The one interface every job backend implements: what the portal asks of a backend, and nothing of how.

Backends are plain Python: no Django, no portal imports. The portal never sees a transport: it asks a backend to
render, submit, find, report statuses and final records, cancel, and to list and read the files a job left, and
the backend class says how it is reached and as whom (`reach`, `connect`). See docs/decisions/0008.

Schedulers reached through a shell (Slurm, PBS, Grid Engine, the local runner) share a skeleton,
`backends.shell.ShellBackend`: it runs every command and checks it, and each adapter supplies the command and a
parser of its output (psij-python's BatchSchedulerExecutor shape). A backend reached another way (AWS Batch, a
Kubernetes API) implements this interface directly (docs/decisions/0052). The plain data all of this speaks lives
in backends/spec.py and is re-exported here, so callers write `from backends.base import JobSpec, State`.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import ClassVar

from backends.cache import CacheEntry
from backends.forward import Forward
from backends.listing import MAX_LISTED_DEPTH, MAX_LISTED_FILES
from backends.safety import DIRECTIVE_PREFIXES, directive_lines, validate_spec
from backends.sampling import Chunk, FetchRequest
from backends.script import Dialect, assemble, render_body
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
    Packed,
    Reach,
    RemoteFile,
    Resources,
    StagingReport,
    State,
    SubmitRefused,
    element_dir,
)
from backends.transport import Transport, TransportError

__all__ = [
    "DATA_DIR", "DataFile", "DataInput", "DataRefused", "StagingReport", "FINAL_STATES", "OUTPUTS_DIR", "PAYLOAD_FILE", "SCRIPT_FILE", "STDERR_FILE", "STDOUT_FILE", "Access",
    "ArrayElement", "Backend", "BackendError", "InvalidJobSpec", "JobRecord", "JobSpec", "JobStatus", "Launcher", "Load",
    "OutputListing", "Packed", "Reach", "RemoteFile", "Resources", "State", "SubmitRefused", "TransportError", "element_dir",
]

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
    # How a person stops a job there outside the portal, as a job's history names it ("scancel by root").
    cancel_program: ClassVar[str] = ""
    # An array element's id: the array's id, this separator, the element's index ("123_4", "123.4").
    element_separator: ClassVar[str] = ""

    def __init__(self, transport: Transport | None, settings: Mapping[str, object] | None = None) -> None:
        # None: a renderer only (pure, safe inside a web request); every command needs a connection.
        self.transport = transport
        self.settings = dict(settings or {})

    @classmethod
    @abstractmethod
    def connect(cls, access: Access, settings: Mapping[str, object] | None = None) -> Backend:
        """This backend reaching its cluster as `access` says (what its `reach` needs)."""

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

    def check_ids(self, scheduler_ids: Sequence[str]) -> list[str]:
        """The ids, each once, if each looks like one of this scheduler's; BackendError otherwise."""
        bad = [i for i in scheduler_ids if not isinstance(i, str) or not self.id_pattern.fullmatch(i)]
        if bad:
            raise BackendError(f"not {self.scheduler_name or self.kind} job ids: {bad!r}")
        return list(dict.fromkeys(scheduler_ids))

    def element_id(self, array_id: str, index: int) -> str:
        """The scheduler's id of one element of the array `array_id` (as `submit` returned it)."""
        if not self.supports_arrays:
            raise NotImplementedError(f"{self.kind} does not submit arrays")
        return f"{array_id}{self.element_separator}{index}"

    # ------------------------------------------------------ what the portal asks of every backend

    @abstractmethod
    def submit(self, spec: JobSpec, script: str | None = None) -> str:
        """Submit and return the scheduler's job id. `script` overrides `render(spec)` (already validated)."""

    @abstractmethod
    def find(self, spec: JobSpec) -> str | None:
        """The id of this job if an earlier attempt already submitted it, else None.

        Looks at the id the submit command recorded in the job directory, then asks the scheduler (queue and
        accounting) for a job with exactly this name. This is what makes a retried submit never a second job.
        """

    @abstractmethod
    def statuses(self, scheduler_ids: Sequence[str]) -> dict[str, JobStatus]:
        """Status of many jobs in one scheduler call. Jobs the queue no longer knows are absent."""

    @abstractmethod
    def final_records(self, scheduler_ids: Sequence[str], *,
                      submitted_since: datetime | None = None) -> dict[str, JobRecord]:
        """Accounting records of finished jobs, in one scheduler call. Jobs accounting does not (yet) know are
        absent. `submitted_since` (none of them was submitted earlier) lets a scheduler whose accounting has no
        index read less of it (Grid Engine); others ignore it."""

    @abstractmethod
    def cancel(self, scheduler_id: str) -> None:
        """Ask the scheduler to stop the job. Cancelling a job that already ended is not an error."""

    @abstractmethod
    def load(self, queues: Sequence[str] = ()) -> Load:
        """How busy the cluster is now: jobs waiting and running, free nodes, when the waiting ones should start
        (where the scheduler says). `queues` narrows it to the portal's own queues where a backend has many."""

    @abstractmethod
    def stage_data(self, spec: JobSpec, project: str, datasets: Sequence[DataInput], *,
                   heartbeat: Callable[[], None] | None = None) -> tuple[JobSpec, StagingReport]:
        """Make each dataset readable at `<job dir>/data/<name>` before `submit` (backends/staging.py): object-store
        files copied into the cluster's per-project cache unless already there (by SHA-256; shared by the project's
        group where the cluster's `data_cache` names `{group}`, else the account's own), registered paths
        linked in place. Returns the spec to submit. Idempotent, so a retried dispatch copies nothing twice.
        DataRefused for a dataset this job can never have; BackendError/TransportError for what may pass.
        `heartbeat` is called every few seconds while bytes move (the dispatch worker renews its lease)."""

    @abstractmethod
    def cache_entries(self, project: str, group: str = "") -> list[CacheEntry]:
        """The files in the project's dataset cache here (the account's own, or the group's where `data_cache`
        names `{group}`): what the portal measures and prunes (backends/cache.py)."""

    @abstractmethod
    def prune_cache(self, project: str, shas: Sequence[str], group: str = "") -> int:
        """Remove these entries from the project's dataset cache here; the portal chose them."""

    def check_data_path(self, path: str, root: str) -> str:
        """The resolved `path` if it lies inside `root` and this account can read it (a registered dataset is
        checked as whoever registers it); DataRefused saying why not. A backend without a file system of its own
        to register paths on refuses them all."""
        raise DataRefused(f"{self.scheduler_name or self.kind} has no file system to register a path on")

    @abstractmethod
    def stream_file(self, workdir: str, path: str):
        """The bytes of a file the job wrote (relative to its directory), a chunk at a time."""

    def read_samples(self, requests: Sequence[FetchRequest], limit: int = 256 * 1024) -> dict[str, dict[str, Chunk]]:
        """New bytes the sampler (backends/sampler.sh) wrote for many jobs, from the offsets the portal holds, as
        few round trips as the backend allows (backends/sampling.py): {key: {node file: Chunk}}. A backend that
        cannot read them answers {}: the idle rule then sees no samples, never an idle job."""
        return {}

    @abstractmethod
    def read_file(self, workdir: str, path: str, *, offset: int = 0, limit: int = 1 << 20) -> bytes:
        """Bytes of a file the job wrote, `path` relative to its job directory; b"" if it does not exist (yet)."""

    @abstractmethod
    def read_output(self, workdir: str, stream: str, offset: int = 0, limit: int = 1 << 20) -> bytes:
        """Part of a job's stdout or stderr; empty if the file does not exist yet."""

    @abstractmethod
    def list_outputs(self, workdir: str, *, limit: int = MAX_LISTED_FILES,
                     depth: int = MAX_LISTED_DEPTH) -> OutputListing:
        """What the job left in its outputs/ directory (`depth` levels deep, at most `limit` entries), paths
        relative to it (backends/listing.py). Read a file with `read_file(workdir, f"outputs/{path}")` or
        `stream_file`."""

    def forward(self, host: str, port: int, *, bind_host: str = "127.0.0.1", bind_port: int = 0) -> Forward:
        """A port listening on this host (`bind_host`:`bind_port`, 0 for any free one) whose every connection is
        carried to `host`:`port` as the cluster's login node reaches it, as this backend's account: what a session
        on a cluster whose nodes the hub cannot reach is opened through (backends/forward.py, docs/decisions/0056).
        The target is fixed here; `close()` the forward to stop it. BackendError where this backend cannot."""
        raise BackendError(f"{self.scheduler_name or self.kind} cannot forward connections to its nodes")

    @abstractmethod
    def whoami(self) -> str:
        """The name the backend acts as on the cluster (what a linked account's key logs in as)."""

    @abstractmethod
    def close(self) -> None:
        """Drop the connection underneath (a pooled SSH connection is otherwise kept for the next caller)."""
