"""The one small interface every job backend implements, and the plain data it speaks.

Backends are plain Python: no Django, no portal imports. They take a `JobSpec` and a `Transport` and return
plain results, so each scheduler is testable alone and reusable from the CLI.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import ClassVar

from backends.transport import Transport


class BackendError(Exception):
    """The scheduler or the connection to it failed in a way that may pass: retry later."""


class SubmitRefused(BackendError):
    """The scheduler refused the job. Permanent: `str(exc)` is the scheduler's own message for the user."""


class InvalidJobSpec(ValueError):
    """A job description that must never reach a scheduler (unsafe or impossible field)."""


class State(enum.StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"

    @property
    def is_final(self) -> bool:
        return self in FINAL_STATES


FINAL_STATES = frozenset({State.COMPLETED, State.FAILED, State.CANCELLED, State.TIMED_OUT})


class Launcher(enum.StrEnum):
    """How the payload is started inside the allocation."""

    SCRIPT = "script"  # run once, on the first node
    TORCHRUN = "torchrun"  # one torchrun per node, rendezvous on the first host, one process per GPU
    MPIRUN = "mpirun"  # mpirun -npernode PPN -n NP (the TSUBAME / ChainerMN pattern)


@dataclass(frozen=True)
class Resources:
    nodes: int = 1
    gpus_per_node: int = 0
    gpu_type: str = ""
    cpus_per_node: int = 1
    memory_gb: int | None = None
    # Scheduler-specific mapping chosen by a site admin for a hardware type, e.g.
    # {"partition": "gpu", "gres": "gpu:a100:8"} (Slurm), {"resource": "f_node"} (TSUBAME/ABCI),
    # {"queue": "gpu"} (PBS). Admin-curated, still validated by each backend before it becomes a directive.
    mapping: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ArrayElement:
    """One element of a scheduler array (one point of a parameter sweep).

    Elements are numbered 1..N. Each runs in its own directory `<workdir>/<index>` holding the payload, the
    job's files and these `files` (e.g. its parameters.json), and gets `env` on top of the job's environment;
    the scheduler writes its stdout/stderr there, so an element's directory looks like a plain job's.
    """

    index: int
    env: Mapping[str, str] = field(default_factory=dict)
    files: Mapping[str, bytes] = field(default_factory=dict)


def element_dir(workdir: str, index: int) -> str:
    return f"{workdir.rstrip('/')}/{index}"


@dataclass(frozen=True)
class JobSpec:
    """Everything a backend needs to run one job. Built by the portal, validated by `backends.safety`."""

    name: str  # scheduler job name; carries the portal's job id so a lost reply can be reconciled
    payload: str  # the user's script (bash); written to its own file, never parsed by the scheduler
    walltime_seconds: int
    resources: Resources = field(default_factory=Resources)
    workdir: str = ""  # job directory on the cluster: relative to the login home, or absolute
    cwd: str = ""  # where the payload runs, if not the job directory (e.g. ~/projects/vit)
    group: str = ""  # scheduler group/account/project (Slurm -A, PBS -P, TSUBAME/ABCI -g, SGE -P)
    modules: Sequence[str] = ()
    container: str = ""  # image reference (docker://..., or a .sif path) run with apptainer
    setup: str = ""  # admin-curated shell lines run before the launch (e.g. activating a virtualenv)
    env: Mapping[str, str] = field(default_factory=dict)
    launcher: Launcher = Launcher.SCRIPT
    procs_per_node: int = 0  # 0 = one per GPU (or 1 without GPUs)
    files: Mapping[str, bytes] = field(default_factory=dict)  # extra files for the job dir (notebook, params)
    # Non-empty: one scheduler array of these elements (1..N), submitted once (`--array`, `-t`, `-J`).
    array: Sequence[ArrayElement] = ()

    @property
    def procs(self) -> int:
        if self.procs_per_node:
            return self.procs_per_node
        return max(self.resources.gpus_per_node, 1)

    @property
    def array_size(self) -> int:
        return len(self.array)


@dataclass(frozen=True)
class JobStatus:
    """What the queue says about a job right now."""

    scheduler_id: str
    state: State
    reason: str = ""
    exit_code: int | None = None
    # The queue still holds an entry for a job that will never run (Grid Engine's error state): it counts
    # against the user's limits until deleted, so the portal removes it once the failure is recorded.
    stuck: bool = False


@dataclass(frozen=True)
class JobRecord:
    """The final word on a job, from the scheduler's accounting."""

    scheduler_id: str
    state: State
    exit_code: int | None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    elapsed_seconds: int | None = None
    nodes: int | None = None
    reason: str = ""
    raw: Mapping[str, str] = field(default_factory=dict)


# Standard file names inside a job directory: the portal and storage find outputs here on every backend.
STDOUT_FILE = "stdout.log"
STDERR_FILE = "stderr.log"
SCRIPT_FILE = "job.sh"
PAYLOAD_FILE = "payload.sh"
OUTPUTS_DIR = "outputs"


class Backend(ABC):
    """One adapter per scheduler behind this interface (an AWS Batch backend fits it too)."""

    kind: ClassVar[str]
    # Whether the portal may submit a sweep as one scheduler array (`element_id` and per-element ids in
    # `statuses`, `final_records` and `cancel` work); otherwise a sweep is submitted job by job.
    supports_arrays: ClassVar[bool] = False
    # Prefix of the lines the scheduler reads as options ("#SBATCH", "#PBS", "#$"), or "" if none.
    directive_prefix: ClassVar[str] = ""

    def __init__(self, transport: Transport, settings: Mapping[str, object] | None = None) -> None:
        self.transport = transport
        self.settings = dict(settings or {})

    @abstractmethod
    def directives(self, spec: JobSpec) -> list[str]:
        """The scheduler directive lines for this job (validated; nothing user-typed unchecked)."""

    @abstractmethod
    def render(self, spec: JobSpec) -> str:
        """The exact job script that `submit` will hand to the scheduler."""

    @abstractmethod
    def submit_command(self, spec: JobSpec) -> list[str]:
        """The submit command as run in the job directory (shown to the user beside the script: some options,
        like TSUBAME/ABCI's `-g GROUP`, live on the command line, not in the script)."""

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
    def final_records(self, scheduler_ids: Sequence[str]) -> dict[str, JobRecord]:
        """Accounting records of finished jobs. Jobs accounting does not (yet) know are absent."""

    @abstractmethod
    def cancel(self, scheduler_id: str) -> None:
        """Ask the scheduler to stop the job. Cancelling a job that already ended is not an error."""

    def element_id(self, array_id: str, index: int) -> str:
        """The scheduler's id of one element of the array `array_id` (as `submit` returned it)."""
        raise NotImplementedError(f"{self.kind} does not submit arrays")

    def output_path(self, spec_workdir: str, stream: str) -> str:
        name = {"stdout": STDOUT_FILE, "stderr": STDERR_FILE}[stream]
        return f"{spec_workdir.rstrip('/')}/{name}"

    def read_output(self, workdir: str, stream: str, offset: int = 0, limit: int = 1 << 20) -> bytes:
        """Part of a job's stdout or stderr; empty if the file does not exist yet."""
        return self.transport.read_file(self.output_path(workdir, stream), offset=offset, limit=limit)
