"""What may reach a login node's shell or a scheduler's directive parser.

Everything user-typed is either checked against a narrow pattern here (anything that becomes part of a
directive or a file name) or quoted where it is used (values). The payload itself never sits in the file a
scheduler parses: it travels as its own file, so a `#SBATCH` line inside it is inert.
"""

from __future__ import annotations

import hashlib
import re
from collections import OrderedDict
from collections.abc import Iterable, Mapping

from backends.spec import InvalidJobSpec, JobSpec

MAX_PAYLOAD_BYTES = 1 << 20
# Every prefix some batch scheduler reads options from. None may come from user text or curated setup lines,
# whichever scheduler a cluster runs: a script may pass through more than one (the Torque wrappers hand it to
# sbatch), and Grid Engine reads `#$` lines anywhere in a file.
DIRECTIVE_PREFIXES = ("#SBATCH", "#PBS", "#$", "#BSUB")

JOB_NAME_RE = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,62}")
GROUP_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
MODULE_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*(/[A-Za-z0-9_][A-Za-z0-9_.+-]*)*")
ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
# Image references: docker://nvcr.io/nvidia/pytorch:24.05-py3, oras://..., /shared/images/torch.sif
CONTAINER_RE = re.compile(r"((docker|oras|library|docker-daemon)://)?/?[A-Za-z0-9_][A-Za-z0-9_./:@+-]*")
# The nvidia-smi the sampler runs: a command name or an absolute path (a site setting, quoted all the same).
SAMPLER_COMMAND_RE = re.compile(r"/?[A-Za-z0-9_][A-Za-z0-9_./+-]{0,254}")
# Values an admin maps a hardware type to (partition, gres, resource names, select statements).
MAPPING_VALUE_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:=,+/-]*")
FILE_NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
PATH_RE = re.compile(r"[A-Za-z0-9_./~+-]+")
# C0/C1 controls (tab allowed) and Unicode line/paragraph separators: never meaningful in a value.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")
# Environment variables the portal sets itself or that would change how the job is run.
# Also bash's special and read-only variables (`_`, UID, SHELLOPTS, … cannot meaningfully be exported) and the
# scheduler's own job variables, which srun/mpirun inside the job rely on.
RESERVED_ENV = re.compile(
    r"(KAKEHASHI_.*|MASTER_ADDR|MASTER_PORT|PATH|LD_PRELOAD|LD_LIBRARY_PATH|BASH_ENV|ENV|IFS|_|BASH.*|SHELLOPTS"
    r"|BASHOPTS|UID|EUID|PPID|PWD|OLDPWD|HOME|SHELL|USER|LOGNAME|HOSTNAME|RANDOM|SRANDOM|SECONDS|LINENO|FUNCNAME"
    r"|GROUPS|EPOCHSECONDS|EPOCHREALTIME|PS[0-4]|PROMPT_COMMAND|SLURM_.*|PBS_.*|SGE_.*|JOB_ID|PE_HOSTFILE|NSLOTS|NHOSTS)"
)


def _fullmatch(pattern: re.Pattern[str], value: str) -> bool:
    return isinstance(value, str) and pattern.fullmatch(value) is not None


def check_job_name(name: str) -> str:
    if not _fullmatch(JOB_NAME_RE, name):
        raise InvalidJobSpec(
            f"job name {name!r} is not allowed: start with a letter, then letters, digits, '.', '_' or '-' "
            "(at most 63 characters, no spaces)"
        )
    return name


def check_group(group: str) -> str:
    if group and not _fullmatch(GROUP_RE, group):
        raise InvalidJobSpec(f"group/account {group!r} may only hold letters, digits, '.', '_' and '-'")
    return group


def check_modules(modules: Iterable[str]) -> list[str]:
    result = []
    for module in modules:
        if not _fullmatch(MODULE_RE, module) or ".." in module:
            raise InvalidJobSpec(f"module name {module!r} is not allowed (letters, digits, '._+-' and '/')")
        result.append(module)
    return result


def check_env(env: Mapping[str, str]) -> dict[str, str]:
    for key, value in env.items():
        if not _fullmatch(ENV_NAME_RE, key):
            raise InvalidJobSpec(f"environment variable name {key!r} is not allowed (letters, digits and '_')")
        if RESERVED_ENV.fullmatch(key):
            raise InvalidJobSpec(f"environment variable {key} is set by Kakehashi and cannot be overridden")
        if not isinstance(value, str):
            raise InvalidJobSpec(f"environment variable {key} must be text")
        if any(ch in value for ch in "\n\r\0") or _CONTROL.search(value):
            raise InvalidJobSpec(f"environment variable {key} may not contain line breaks or control characters")
        if len(value) > 4096:
            raise InvalidJobSpec(f"environment variable {key} is longer than 4096 characters")
    return dict(env)


def check_container(image: str) -> str:
    if image and (not _fullmatch(CONTAINER_RE, image) or ".." in image):
        raise InvalidJobSpec(f"container image {image!r} is not a valid image reference or .sif path")
    return image


def check_path(path: str, *, what: str = "path") -> str:
    """A relative or absolute path without `..`, spaces or shell metacharacters."""
    if not path:
        return path
    if not _fullmatch(PATH_RE, path) or any(part == ".." for part in path.split("/")):
        raise InvalidJobSpec(
            f"{what} {path!r} is not allowed: use letters, digits and '._-~/+', and no '..' component"
        )
    if path.startswith("~") and not path.startswith("~/"):
        raise InvalidJobSpec(f"{what} {path!r}: only your own home (~/) may be referred to")
    return path


def check_file_name(name: str) -> str:
    if not _fullmatch(FILE_NAME_RE, name) or name in {".", ".."}:
        raise InvalidJobSpec(f"file name {name!r} is not allowed")
    return name


def check_file_path(path: str) -> str:
    """A job file's path in its directory: plain names, in at most 8 folders (a notebook's data/labels.csv)."""
    parts = path.split("/") if isinstance(path, str) else []
    if not parts or len(parts) > 8:
        raise InvalidJobSpec(f"file path {path!r} is not allowed")
    for part in parts:
        check_file_name(part)
    return path


def check_mapping(mapping: Mapping[str, str]) -> dict[str, str]:
    for key, value in mapping.items():
        if not _fullmatch(MAPPING_VALUE_RE, str(value)):
            raise InvalidJobSpec(f"hardware mapping {key}={value!r} holds characters a scheduler option cannot")
    return {k: str(v) for k, v in mapping.items()}


def check_payload(payload: str) -> str:
    if not isinstance(payload, str) or not payload.strip():
        raise InvalidJobSpec("the script is empty: write at least one command")
    if "\0" in payload:
        raise InvalidJobSpec("the script contains a NUL byte; is it a binary file?")
    if len(payload.encode()) > MAX_PAYLOAD_BYTES:
        raise InvalidJobSpec(f"the script is larger than {MAX_PAYLOAD_BYTES // 1024} KiB")
    return payload


def validate_spec(spec: JobSpec) -> JobSpec:
    """Raise InvalidJobSpec with a message a person can act on, or return the spec unchanged."""
    check_job_name(spec.name)
    check_payload(spec.payload)
    if isinstance(spec.sample_seconds, bool) or not isinstance(spec.sample_seconds, int) \
            or not 0 <= spec.sample_seconds <= 3600:
        raise InvalidJobSpec("the sampling interval must be a whole number of seconds from 0 to 3600")
    if not SAMPLER_COMMAND_RE.fullmatch(spec.nvidia_smi or ""):
        raise InvalidJobSpec(f"{spec.nvidia_smi!r} is not a command name or path the sampler can run")
    check_group(spec.group)
    check_modules(spec.modules)
    check_env(spec.env)
    check_container(spec.container)
    check_path(spec.workdir, what="job directory")
    check_path(spec.cwd, what="working directory")
    if any(ch in spec.setup for ch in "\0") or any(
        line.lstrip().startswith(DIRECTIVE_PREFIXES) for line in spec.setup.splitlines()
    ):
        raise InvalidJobSpec("the software's setup lines may not hold scheduler directives")
    check_mapping(spec.resources.mapping)
    if spec.resources.gpu_type and not _fullmatch(GROUP_RE, spec.resources.gpu_type):
        raise InvalidJobSpec(f"GPU type {spec.resources.gpu_type!r} is not allowed")
    for name in spec.files:
        check_file_path(name)
    if not isinstance(spec.walltime_seconds, int) or spec.walltime_seconds <= 0:
        raise InvalidJobSpec("walltime must be a positive duration")
    for label, number in (
        ("nodes", spec.resources.nodes),
        ("GPUs per node", spec.resources.gpus_per_node),
        ("CPUs per node", spec.resources.cpus_per_node),
        ("processes per node", spec.procs_per_node),
    ):
        if not isinstance(number, int) or number < 0 or number > 100_000:
            raise InvalidJobSpec(f"{label} must be a whole number between 0 and 100000")
    if spec.resources.nodes < 1:
        raise InvalidJobSpec("a job needs at least one node")
    if spec.array:
        indexes = [element.index for element in spec.array]
        if indexes != list(range(1, len(indexes) + 1)) or len(indexes) > MAX_ARRAY_ELEMENTS:
            raise InvalidJobSpec(f"array elements must be numbered 1..N, at most {MAX_ARRAY_ELEMENTS}")
        for element in spec.array:
            check_env(element.env)
            for name in element.files:
                check_file_name(name)
    return spec


MAX_ARRAY_ELEMENTS = 1000


def directive_lines(script: str, prefix: str) -> list[str]:
    """Every line of `script` a scheduler with this directive prefix could read as an option."""
    if not prefix:
        return []
    return [line.strip() for line in script.splitlines() if line.lstrip().startswith(prefix)]


# Digests of scripts bash parsed (the oldest forgotten first): bash -n answers the same for the same text, and starting bash
# costs the web process ~1 ms of CPU (fork, pipes), the largest single check of a submit (issue 28, goal 4). A script
# that submits many jobs mostly sends one script with different env or parameters. Only a clean parse is kept: a
# refusal is asked again (its message is bash's), and so is a check that could not run.
_PARSED: OrderedDict[bytes, None] = OrderedDict()
_PARSED_KEPT = 1024


def bash_syntax_error(script: str) -> str | None:
    """bash's own complaint about a script that cannot even be parsed (`bash -n`), or None.

    Catching this at submit saves a researcher a queue wait for a job that fails in its first second.
    """
    import subprocess

    text = script.encode()
    digest = hashlib.sha256(text).digest()
    if digest in _PARSED:
        return None
    try:
        result = subprocess.run(["bash", "-n"], input=text, capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None  # cannot check here: the cluster's bash will say
    if result.returncode == 0:
        _PARSED[digest] = None
        while len(_PARSED) > _PARSED_KEPT:
            _PARSED.popitem(last=False)
        return None
    message = result.stderr.decode("utf-8", "replace").strip().replace("bash: ", "")
    return message[:500] or "bash cannot parse it"
