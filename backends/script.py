"""The parts of a job script every scheduler shares: preamble, modules, environment, launch line, staging.

A backend supplies its directives and three small dialect facts (how to list the allocation's hosts, the
variable holding the scheduler's job id, how to enter the job directory); the rest is rendered here once.
"""

from __future__ import annotations

import io
import shlex
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

from backends.spec import PAYLOAD_FILE, SCRIPT_FILE, JobSpec, Launcher


@dataclass(frozen=True)
class Dialect:
    hosts_command: str  # prints one host per line (may be empty outside a multi-host allocation)
    job_id_var: str  # e.g. SLURM_JOB_ID
    enter_dir: str = ""  # shell line that enters the job directory, if the scheduler does not already
    # How one command per node is started: "mpirun", "srun" where the scheduler starts per-node tasks itself, or
    # "" where the platform already runs the whole script once on every node (AWS Batch multi-node jobs).
    multi_node_prefix: str = "mpirun"
    array_index_var: str = ""  # e.g. SLURM_ARRAY_TASK_ID: which element of an array this is
    # Where the job's datasets are, relative to the job directory (staging links them there before the submit).
    data_dir: str = "data"
    # A number that tells two jobs on one host apart (their MASTER_PORT), when the job id is not one: "" = the id.
    port_seed_var: str = ""


def hms(seconds: int) -> str:
    hours, rest = divmod(int(seconds), 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}"


def _mpirun_env_flags(spec: JobSpec) -> list[str]:
    """OpenMPI does not forward the environment by itself: pass the rendezvous and NCCL settings on."""
    names = ["MASTER_ADDR", "MASTER_PORT", "KAKEHASHI_JOB_DIR", "KAKEHASHI_OUTPUT_DIR"]
    names += sorted(k for k in spec.env if k.startswith(("NCCL_", "OMP_", "TORCH_", "PYTHON")))
    flags: list[str] = []
    for name in names:
        flags += ["-x", name]
    return flags


# The allocation's hosts, one per line, in the scheduler's order: the first is where the job script runs.
HOSTFILE = '"$KAKEHASHI_JOB_DIR/hosts.txt"'


def tasks_per_node(spec: JobSpec) -> int:
    """The tasks an allocation holds on each node. torchrun is one agent per node that starts the processes
    itself; mpirun and a plain script get one task per process."""
    return 1 if spec.launcher == Launcher.TORCHRUN else spec.procs


def shell_path(path: str) -> str:
    """A validated path as one shell word; a leading ~/ still means the user's home."""
    if path == "~":
        return '"$HOME"'
    if path.startswith("~/"):
        return '"$HOME"/' + shlex.quote(path[2:])
    return shlex.quote(path)


def launch_line(spec: JobSpec, dialect: Dialect) -> str:
    """The command that starts the payload inside the allocation: one process per GPU, right hosts."""
    nodes = spec.resources.nodes
    ppn = spec.procs
    # By absolute path: the payload may run in a working directory of the user's choosing.
    payload = f'bash "$KAKEHASHI_JOB_DIR/{PAYLOAD_FILE}"'
    quoted_container = ""
    if spec.container:
        nv = " --nv" if spec.resources.gpus_per_node else ""
        quoted_container = f'apptainer exec{nv} --bind "$KAKEHASHI_JOB_DIR" {shlex.quote(spec.container)}'

    def join(*parts: str) -> str:
        return " ".join(p for p in parts if p)

    if spec.launcher == Launcher.SCRIPT:
        return join(quoted_container, payload)

    if spec.launcher == Launcher.TORCHRUN:
        torchrun = ["torchrun", f"--nnodes={nodes}", f"--nproc-per-node={ppn}"]
        if nodes == 1:
            torchrun.append("--standalone")
            rdzv = ""
        else:
            rdzv = (
                '--rdzv-backend=c10d --rdzv-endpoint="$MASTER_ADDR:$MASTER_PORT" '
                f'--rdzv-id="${{{dialect.job_id_var}:-kakehashi}}"'
            )
        torch = join(shlex.join(torchrun), rdzv, "--no-python", payload)
        if nodes == 1 or not dialect.multi_node_prefix:
            return join(quoted_container, torch)
        if dialect.multi_node_prefix == "srun":
            # --ntasks as well: srun would otherwise take the allocation's task count and start more agents.
            per_node = shlex.join(
                ["srun", f"--nodes={nodes}", f"--ntasks={nodes}", "--ntasks-per-node=1", "--kill-on-bad-exit=1"]
            )
        else:
            per_node = join(
                shlex.join(["mpirun", "-npernode", "1", "-n", str(nodes)]),
                f"-hostfile {HOSTFILE}",
                shlex.join(_mpirun_env_flags(spec)),
            )
        return join(per_node, quoted_container, torch)

    if spec.launcher == Launcher.MPIRUN:
        mpirun = shlex.join(["mpirun", "-npernode", str(ppn), "-n", str(nodes * ppn)])
        hostfile = f"-hostfile {HOSTFILE}" if nodes > 1 else ""
        return join(mpirun, hostfile, shlex.join(_mpirun_env_flags(spec)), quoted_container, payload)

    raise ValueError(f"unknown launcher {spec.launcher!r}")


SAMPLER_FILE = "kakehashi-sampler.sh"
SAMPLER_SOURCE = (Path(__file__).parent / "sampler.sh").read_bytes()


def sampler_lines(spec: JobSpec, dialect: Dialect) -> list[str]:
    """Start the sampler once on every node of the allocation, in the background, its output thrown away: it can
    neither fail nor hold up the job. Multi-node: the scheduler's own per-node launch (srun --overlap inside any
    Slurm allocation, the PBS dialect that runs on Slurm too; else mpirun over the host list, as Grid Engine's and
    PBS's templates start one agent per node); where the platform runs the script on every node (AWS Batch), here."""
    if not spec.sample_seconds:
        return []
    sampler = (f'sh "$KAKEHASHI_JOB_DIR/{SAMPLER_FILE}" "$KAKEHASHI_JOB_DIR" {int(spec.sample_seconds)} '
               f"{shlex.quote(spec.nvidia_smi)}")
    # Started here, its launcher is this script: it says so, so a sampler whose script died as it started it stops
    # (backends/sampler.sh). Not through srun or mpirun, whose tasks have launchers of their own on every node.
    direct = f"KAKEHASHI_SAMPLER_LAUNCHER=$$ {sampler}"
    quiet = "</dev/null >/dev/null 2>&1 &"
    lines = [f"# ---- the sampler: what each node uses, every {spec.sample_seconds} s (it never fails the job) ----",
             '_kh_sampler=""']
    nodes = spec.resources.nodes
    if nodes == 1 or not dialect.multi_node_prefix:
        lines.append(f"{direct} {quiet} _kh_sampler=$!")
        return lines
    srun = shlex.join(["srun", "--overlap", f"--nodes={nodes}", f"--ntasks={nodes}", "--ntasks-per-node=1"])
    mpirun = f"{shlex.join(['mpirun', '-npernode', '1', '-n', str(nodes)])} -hostfile {HOSTFILE}"
    lines += [
        'if [ -n "${SLURM_JOB_ID:-}" ] && command -v srun >/dev/null 2>&1; then',
        f"  {srun} {sampler} {quiet} _kh_sampler=$!",
        "elif command -v mpirun >/dev/null 2>&1; then",
        f"  {mpirun} {sampler} {quiet} _kh_sampler=$!",
        "else",
        f"  {direct} {quiet} _kh_sampler=$!  # no per-node launcher: this node only",
        "fi",
    ]
    return lines


def render_body(spec: JobSpec, dialect: Dialect) -> str:
    """Everything after the directives: say what runs where, set up, launch, report the exit code."""
    lines = [
        f"# ---- generated by Kakehashi for job {spec.name}; the payload is in {PAYLOAD_FILE} ----",
    ]
    if dialect.enter_dir:
        lines.append(dialect.enter_dir)
    if spec.datasets:
        # Set in the job directory itself: an array's elements share its datasets.
        lines += [
            f"# datasets, each at $KAKEHASHI_DATA/<name>: {' '.join(spec.datasets)}",
            f'export KAKEHASHI_DATA="$PWD/{dialect.data_dir}"',
        ]
    if spec.array:
        lines += _enter_element_dir(spec, dialect)
    lines += [
        'export KAKEHASHI_JOB_DIR="$PWD"',
        f"export KAKEHASHI_JOB_NAME={shlex.quote(spec.name)}",
        f'export KAKEHASHI_SCHEDULER_JOB_ID="${{{dialect.job_id_var}:-}}"',
        'export KAKEHASHI_OUTPUT_DIR="$KAKEHASHI_JOB_DIR/outputs"',
        'mkdir -p "$KAKEHASHI_OUTPUT_DIR"',
        # Each host once, in the scheduler's order (the first is where this script runs: the rendezvous host).
        f"{{ {dialect.hosts_command} ; }} 2>/dev/null | awk '!seen[$0]++' > hosts.txt",
        "[ -s hosts.txt ] || hostname > hosts.txt",
        'export MASTER_ADDR="$(head -n 1 hosts.txt)"',
        # A port derived from the job id keeps two jobs sharing a first node from colliding. Only the id's
        # leading digits count: PBS ids carry a server suffix ("1234.server", "1234[5].server").
        f'_kh_id_digits="${{{dialect.port_seed_var or dialect.job_id_var}%%[!0-9]*}}"',
        (
            # Elements of a Grid Engine array share one job id: the element's index keeps their ports apart.
            'export MASTER_PORT=$(( 29500 + (10#${_kh_id_digits:-0} + KAKEHASHI_ARRAY_INDEX) % 1000 ))'
            if spec.array
            else 'export MASTER_PORT=$(( 29500 + 10#${_kh_id_digits:-0} % 1000 ))'
        ),
        # Ids that agree in their last three digits (or another program) may hold that port on a shared first node:
        # the next port nobody listens on there, where rank 0 will (seen failing as EADDRINUSE on the test cluster).
        'for _kh_try in 1 2 3 4 5 6 7 8 9 10; do (exec 3<>"/dev/tcp/$MASTER_ADDR/$MASTER_PORT") 2>/dev/null || break; '
        "MASTER_PORT=$(( MASTER_PORT + 1 )); done",
        'echo "== Kakehashi job $KAKEHASHI_JOB_NAME (scheduler id ${KAKEHASHI_SCHEDULER_JOB_ID:-none}) =="',
        'echo "date:    $(date -Is)"',
        'echo "hosts:   $(tr \'\\n\' \' \' < hosts.txt)"',
        'echo "workdir: $KAKEHASHI_JOB_DIR"',
    ]
    lines.append("if [ -f /etc/profile.d/modules.sh ]; then . /etc/profile.d/modules.sh; fi")
    if spec.modules:
        mods = " ".join(shlex.quote(m) for m in spec.modules)
        lines += [
            f"module load {mods} || {{ echo 'Kakehashi: module load {' '.join(spec.modules)} failed' >&2; exit 96; }}",
        ]
    lines.append(
        'if command -v module >/dev/null 2>&1; then '
        'echo "modules: $(module -t list 2>&1 | grep -v \':$\' | tr \'\\n\' \' \')"; fi'
    )
    for key, value in spec.env.items():
        lines.append(f"export {key}={shlex.quote(value)}")
    if spec.array:
        lines += _element_env(spec)
    if spec.setup.strip():
        lines += ["# software setup (from the catalog)", spec.setup.strip()]
    if spec.cwd:
        target = shell_path(spec.cwd)
        lines.append(f"cd -- {target} || {{ echo 'Kakehashi: cannot enter the working directory' >&2; exit 95; }}")
    lines += [
        "if command -v nvidia-smi >/dev/null 2>&1; then "
        "nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader; fi",
        'echo "gpus:    ${CUDA_VISIBLE_DEVICES:-none visible}"',
        'echo "python:  $(python3 --version 2>&1 || echo none)"',
        *sampler_lines(spec, dialect),
        'echo "== start $(date -Is) =="',
        launch_line(spec, dialect),
        "status=$?",
        # Accounting may not keep exit codes (e.g. the Torque wrappers): leave our own record beside the output.
        # Every node's sampler stops within a second of seeing this file (a shared job directory).
        'echo "$status" > "$KAKEHASHI_JOB_DIR/kakehashi-exit-status"',
        # Let the per-node launch end by itself (5 s at most), then stop it: a per-node task still running when the
        # job ends is a failed job to Grid Engine's accounting ("failed 100: assumedly after job"), and an mpirun
        # killed while its tasks run ends the job with exit status 1 there.
        *(['if [ -n "$_kh_sampler" ]; then for _kh_i in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$_kh_sampler" 2>/dev/null '
           '|| break; [ "$_kh_i" = 6 ] && kill "$_kh_sampler" 2>/dev/null; sleep 1; done; fi']
          if spec.sample_seconds else []),
        'echo "== end $(date -Is), exit status $status =="',
        'exit "$status"',
    ]
    return "\n".join(lines) + "\n"


def _enter_element_dir(spec: JobSpec, dialect: Dialect) -> list[str]:
    """An array element runs in its own directory (`<job dir>/<index>`), which staging filled beforehand."""
    if not dialect.array_index_var:
        raise ValueError("this scheduler's dialect names no array index variable")
    return [
        f"# ---- one element of an array of {spec.array_size}: its own directory, its own parameters ----",
        f'export KAKEHASHI_ARRAY_INDEX="${{{dialect.array_index_var}:-}}"',
        'case "$KAKEHASHI_ARRAY_INDEX" in',
        "  ''|*[!0-9]*) echo 'Kakehashi: this array job started without an element index' >&2; exit 97 ;;",
        "esac",
        'cd -- "$KAKEHASHI_ARRAY_INDEX" || { echo "Kakehashi: no directory for array element '
        '$KAKEHASHI_ARRAY_INDEX" >&2; exit 97; }',
    ]


def _element_env(spec: JobSpec) -> list[str]:
    """Each element's own variables (its sweep point), chosen by index; shown in the preview as submitted."""
    lines = ['case "$KAKEHASHI_ARRAY_INDEX" in']
    for element in spec.array:
        exports = " ".join(f"{key}={shlex.quote(value)}" for key, value in element.env.items())
        lines.append(f"  {element.index}) {'export ' + exports + ' ' if exports else ''};;")
    lines.append("esac")
    return lines


def assemble(shebang: str, directives: list[str], body: str) -> str:
    return "\n".join([shebang, *directives, body])


def staging_archive(spec: JobSpec, script: str) -> bytes:
    """A tar of the job directory's inputs, sent on the submit command's stdin (one round trip)."""
    buf = io.BytesIO()
    now = time.time()
    inputs = {PAYLOAD_FILE: spec.payload.encode(), **spec.files}
    if spec.sample_seconds:
        inputs[SAMPLER_FILE] = SAMPLER_SOURCE
    if spec.array:
        # Every element's directory holds what a plain job's would: the payload, the files, its own files.
        members = {SCRIPT_FILE: script.encode()}
        for element in spec.array:
            members |= {f"{element.index}/{name}": data for name, data in {**inputs, **element.files}.items()}
    else:
        members = {SCRIPT_FILE: script.encode(), **inputs}
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o700 if name == SCRIPT_FILE else 0o600
            info.mtime = int(now)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def staged_command(workdir: str, submit: str) -> str:
    """Create the job directory, unpack the inputs from stdin, enter it and run `submit` (already quoted).

    The scheduler's id is also written to `scheduler-id` beside the script, so a retry after a lost reply
    finds the job even once the queue has forgotten it.
    """
    d = shlex.quote(workdir)
    return (
        f"mkdir -p -- {d} && tar -x -m -f - -C {d} && cd -- {d} && "
        f"{{ out=$({submit}) || {{ rc=$?; printf '%s\\n' \"$out\"; exit $rc; }}; }} && "
        # One write of a short line by a builtin (no temporary file and mv: every process costs ms here).
        'printf \'%s\\n\' "$out" > scheduler-id && printf \'%s\\n\' "$out"'
    )


def recorded_id_command(workdir: str) -> str:
    d = shlex.quote(workdir)
    return f"cat -- {d}/scheduler-id 2>/dev/null || true"
