"""The plain data backends speak: a `JobSpec` in; `JobStatus`, `JobRecord` and `RemoteFile` out; the errors;
how a backend is reached (`Reach`, `Access`). No Django, no portal imports, no behaviour beyond a few properties.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import BinaryIO


class BackendError(Exception):
    """The scheduler or the connection to it failed in a way that may pass: retry later."""


class SubmitRefused(BackendError):
    """The scheduler refused the job. Permanent: `str(exc)` is the scheduler's own message for the user."""


class DataRefused(Exception):
    """A dataset cannot be given to this job (a registered path unreadable or outside the project's root, bytes
    that arrived with another checksum). Permanent: `str(exc)` says why, for the user; the job fails before it
    is queued."""


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
    # Whose job this is ({"project": ..., "job": ..., "user": ...}): a cloud backend tags what it starts with
    # them, so a bill or a stray instance can always be traced back to a project and a person.
    labels: Mapping[str, str] = field(default_factory=dict)
    # Objects of the shared object store the job reads, by their path under its inputs/ directory:
    # {"cifar10/train.tar": "s3://bucket/projects/vision/cifar10/train.tar"}. A cloud container pulls them itself
    # (backends/batch_entrypoint.py). Datasets attached in the portal (issue 13's staging) arrive here too.
    inputs: Mapping[str, str] = field(default_factory=dict)
    # The SHA-256 (hex) the portal recorded for some of those inputs, by the same path: a container that pulls
    # them checks each on arrival and fails the job rather than run on bytes that are not the dataset's.
    input_sha256: Mapping[str, str] = field(default_factory=dict)
    # Names of the datasets the job reads, each at $KAKEHASHI_DATA/<name> (a link into the job directory's data/,
    # made by `Backend.stage_data` before the submit). Only the names: they are all the script needs.
    datasets: Sequence[str] = ()
    # The sampler (backends/sampler.sh) every node runs beside the job: seconds between samples, 0 = none, and the
    # nvidia-smi it asks (a site may name its own path; the test cluster names a stand-in).
    sample_seconds: int = 0
    nvidia_smi: str = "nvidia-smi"

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
    # When a waiting job is expected to start, where the scheduler predicts it (Slurm's backfill plan, the
    # StartTime `squeue --start` shows); None where it says nothing.
    expected_start: datetime | None = None


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
    # The signal accounting says ended the job (Slurm's "0:15", a cancel or walltime kill), apart from the exit
    # code: a killed job has no exit code of its own, and "exit code 0" would say it succeeded.
    signal: int | None = None
    # Who cancelled it, as the scheduler names them ("root", "alice@login1"), where its record says: what a job's
    # history says of a cancel made on the cluster outside the portal. "" when unknown or not cancelled.
    cancelled_by: str = ""
    # False when accounting may not hold the job's own record yet, only those of tasks it started: Grid Engine writes
    # one per parallel task (`qrsh -inherit`, as mpirun starts its daemons), each as it ends, and the job's own when
    # the job leaves the queue, written out up to a flush interval later; SoGE's qacct does not say which record is
    # whose. The tracker then waits for its accounting grace before it takes this record as the job's end.
    settled: bool = True


# Standard file names inside a job directory: the portal and storage find outputs here on every backend.
STDOUT_FILE = "stdout.log"
STDERR_FILE = "stderr.log"
SCRIPT_FILE = "job.sh"
PAYLOAD_FILE = "payload.sh"
OUTPUTS_DIR = "outputs"


@dataclass(frozen=True)
class RemoteFile:
    """A file a job left behind, as its backend lists it. `path` is relative to the listed directory and comes
    from the cluster: callers must treat it as untrusted text."""

    path: str
    size: int


@dataclass(frozen=True)
class OutputListing:
    """What a job left in its outputs/ directory, as its backend lists it: the regular files (`RemoteFile`s),
    the paths of what is not one (symbolic links, pipes, sockets: never followed, never read), whether the listing
    stopped at its limit (`more`), whether anything lies deeper than the depth listed (`deeper`), and whether
    outputs/ itself is a symbolic link (`outputs_link`: then nothing under it is listed)."""

    files: list[RemoteFile] = field(default_factory=list)
    not_files: list[str] = field(default_factory=list)
    more: bool = False
    deeper: bool = False
    outputs_link: bool = False


@dataclass(frozen=True)
class Load:
    """How busy a cluster is now, as its scheduler says (None: this scheduler does not say). Asked for by the
    health beat (Backend.load) and shown beside the places a job may run; never asked for in a web request."""

    pending: int | None = None  # jobs waiting to start, each array element counted
    running: int | None = None
    free_nodes: int | None = None  # nodes running nothing and ready to take a job
    total_nodes: int | None = None
    # When the last job waiting now is expected to start (Slurm's `squeue --start`), where the scheduler predicts.
    expected_start: datetime | None = None
    per_queue: Mapping[str, int] = field(default_factory=dict)  # pending jobs by partition/queue
    # Queues that cannot take a job now, with why (an AWS Batch queue deleted, disabled or invalid): the portal
    # offers no hardware that submits to them.
    unavailable: Mapping[str, str] = field(default_factory=dict)


class Reach(enum.StrEnum):
    """How the portal reaches a backend, which also says as whom the backend's jobs run."""

    LOCAL = "local"  # commands on the portal host itself, as the portal's own user (`make run`)
    LOGIN_NODE = "login-node"  # SSH to a login node, as a cluster account: the researcher's own, or a project's
    CLOUD_API = "cloud-api"  # a provider's API, with the cluster's own credentials (no login node, no shell)

    @property
    def uses_cluster_account(self) -> bool:
        """Whether a job needs a ClusterAccount (a login name and key) to be submitted, read or cancelled."""
        return self is Reach.LOGIN_NODE


@dataclass(frozen=True)
class Access:
    """What the portal knows about reaching one cluster as one identity, in plain values.

    A backend's `connect` takes what its `reach` needs: a login node its host, pinned host keys and the
    account's key; the portal host its job root; a cloud API the key below (its region is in the settings).
    """

    host: str = ""
    port: int = 22
    username: str = ""
    private_key: str = field(default="", repr=False)
    known_hosts: str = field(default="", repr=False)
    local_root: str = ""
    timeout: float = 30.0
    # A cloud API's credentials where the site stored them (else the worker's own chain: an instance role).
    key_id: str = ""
    secret: str = field(default="", repr=False)


DATA_DIR = "data"  # inside the job directory: one entry per attached dataset, $KAKEHASHI_DATA


@dataclass(frozen=True)
class Packed:
    """Where a small file also sits in a pack, a tar object of many small files in the store (docs/decisions/0062):
    its member (a 512-byte header naming it by its SHA-256, its bytes, zeros to the next 512) starts at `offset` of
    the object `pack`, read with a ranged GET of the presigned URL `get_url` gives. Members that follow each other
    in a pack travel as one GET."""

    pack: str
    offset: int
    get_url: Callable[[], str] = field(compare=False, repr=False)


@dataclass(frozen=True)
class DataFile:
    """One file of a dataset held in the object store. `path` is where it sits inside the dataset ("" for a
    dataset that is one file); `open` gives a stream of its bytes (read in chunks: files may be larger than memory).
    """

    path: str
    sha256: str
    size: int
    open: Callable[[], BinaryIO] = field(compare=False, repr=False)
    # Where the cloud reads it from itself ("s3://bucket/key"), for backends whose jobs pull their own inputs.
    url: str = ""
    # Its bytes [start, end) as a stream, where the store serves ranges (a large file then moves on several streams).
    open_range: Callable[[int, int], BinaryIO] | None = field(default=None, compare=False, repr=False)
    # A short-lived presigned GET of it at the address the worker reaches the store at: small files are fetched
    # this way (a plain HTTP GET costs a third of a boto3 call).
    get_url: Callable[[], str] | None = field(default=None, compare=False, repr=False)
    # A short-lived presigned GET of it, for a login node that fetches from the store itself (cluster option
    # data_pull); None where the portal keeps files on its own disk.
    presign: Callable[[], str] | None = field(default=None, compare=False, repr=False)
    # Where it also sits in a pack (small files only), or None.
    packed: Packed | None = None


@dataclass(frozen=True)
class DataInput:
    """A dataset attached to a job: object-store files copied to the cluster, or a registered path on the
    cluster used in place (which must resolve inside `root`, the project's root there)."""

    name: str
    files: Sequence[DataFile] = ()
    cluster_path: str = ""
    root: str = ""


def size_text(n: int | float) -> str:
    """The one size rule (portal/storage/quota.py size_text uses it too): binary multiples named as such."""
    value, unit = float(n), "B"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            break
        value /= 1024
    return f"{value:.0f} B" if unit == "B" else f"{value:.1f} {unit}"


@dataclass
class StagingReport:
    """What staging did: files and bytes copied, files found in the cluster's cache, paths linked in place."""

    copied_files: int = 0
    copied_bytes: int = 0
    reused_files: int = 0
    reused_bytes: int = 0
    in_place: int = 0
    # Of the copied files, how many (and bytes) the login node fetched from the store itself (data_pull).
    pulled_files: int = 0
    pulled_bytes: int = 0
    # Of the copied files, how many (and bytes) were read from packs of the store, a few GETs for many files.
    packed_files: int = 0
    packed_bytes: int = 0
    # The unix group whose shared cache it was (the project's, docs/decisions/0027); "": the account's own cache.
    shared_group: str = ""
    # A backend that copies nothing before submitting (AWS Batch): what the job's container pulls itself when it
    # starts, checking each file's SHA-256, and from where. Nothing was copied, so nothing is said to have been.
    container_files: int = 0
    container_bytes: int = 0
    container_source: str = ""

    def summary(self) -> str:
        if self.container_files and not (self.copied_files or self.reused_files or self.in_place):
            return (f"nothing copied before submitting: the job's container pulls {self.container_files} file(s), "
                    f"{size_text(self.container_bytes)}, from {self.container_source} when it starts, checking each "
                    "file's SHA-256")
        parts = [f"copied {self.copied_files} file(s), {self.copied_bytes} bytes"
                 + (f" ({self.pulled_files} file(s), {self.pulled_bytes} bytes fetched by the login node from the "
                    "object store itself)" if self.pulled_files else "")
                 + (f" ({self.packed_files} file(s) read from packs of the object store)" if self.packed_files else ""),
                 f"{self.reused_files} file(s) ({self.reused_bytes} bytes) already in the cluster's cache"]
        if self.in_place:
            parts.append(f"{self.in_place} registered path(s) used in place")
        if self.shared_group and (self.copied_files or self.reused_files):
            parts.append(f"the cache shared by group {self.shared_group}")
        return "; ".join(parts)
