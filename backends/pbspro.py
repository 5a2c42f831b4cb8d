"""PBS Professional / OpenPBS (settings {"dialect": "pbspro"}, the default): `#PBS -l select=N:ncpus=C:ngpus=G
:mem=Mgb[:mpiprocs=P]`, the group as a project (`-P`, or `-A` with settings {"account_option": "-A"}), `-o/-e`
as directives (PBS Pro honours them) and `-k oed` so the output is written in place while the job runs
(settings {"direct_write": False} turns it off).

One `qstat -f -F json -x ID...` gives the queue state and, from the job history, `Exit_status`, `substate` and
`comment` of finished jobs (see `_pbspro_outcome` for what they mean). OpenPBS cannot be installed here: this
dialect is tested on recorded outputs (tests/backends/fixtures/pbspro/README.md).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import datetime

from backends.base import STDERR_FILE, STDOUT_FILE, BackendError, JobSpec, Launcher, State
from backends.pbs_base import PBSBase, _checked
from backends.pbs_parse import (
    IndexEntry,
    Observation,
    _elapsed,
    _exit_code,
    _exit_reason,
    _int,
    _raw,
    _signal_reason,
    _walltime_reason,
    parse_duration,
    parse_time,
)
from backends.script import hms

# Extra chunk resources for PBS Pro's select ("gpu_model=a100:host_type=dgx"): no "," or "+", which would start
# another resource or another chunk.
_CHUNK_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=[A-Za-z0-9_.-]+(:[A-Za-z_][A-Za-z0-9_]*=[A-Za-z0-9_.-]+)*")
_PLACE_RE = re.compile(r"[a-z]+(:[a-z]+){0,3}")

# PBS Pro / OpenPBS job_state letters (qstat(1B)); F and X are finished jobs and subjobs in the history.
_PBSPRO_PENDING = {"Q": "queued", "H": "held", "W": "waiting for its start time", "T": "being moved",
                   "M": "moved to another server"}
_PBSPRO_RUNNING = {"R": "", "E": "exiting", "B": "array running", "S": "suspended", "U": "suspended (workstation busy)"}
_PBSPRO_FINAL = {"F", "X"}

# OpenPBS src/include/job.h. PBS Pro substates of a finished job (OGSA-BES): terminated by qdel, finished, failed.
_SUBSTATE_TERMINATED = 91
_JOB_EXEC_KILL_WALLTIME = -29
_PBSPRO_EXEC_CODES = {
    -1: "could not be started (JOB_EXEC_FAIL1)",
    -2: "could not be started after its files were staged (JOB_EXEC_FAIL2)",
    -3: "failed to start and will be retried (JOB_EXEC_RETRY)",
    -4: "aborted on MoM initialisation (JOB_EXEC_INITABT)",
    -10: "has an invalid uid/gid on the execution host (JOB_EXEC_FAILUID)",
    -11: "was requeued (JOB_EXEC_RERUN)",
    -16: "was rejected by a site hook (JOB_EXEC_FAILHOOK_RERUN)",
    -17: "was rejected by a site hook (JOB_EXEC_FAILHOOK_DELETE)",
    -19: "was deleted by a site hook (JOB_EXEC_HOOK_DELETE)",
    -20: "lost its mother superior node (JOB_EXEC_RERUN_MS_FAIL)",
    -22: "failed in a site hook (JOB_EXEC_HOOKERROR)",
    -24: "exceeded its CPUs, burst (JOB_EXEC_KILL_NCPUS_BURST)",
    -25: "exceeded its CPUs, sum (JOB_EXEC_KILL_NCPUS_SUM)",
    -26: "exceeded its virtual memory limit (JOB_EXEC_KILL_VMEM)",
    -27: "exceeded its memory limit (JOB_EXEC_KILL_MEM)",
    -28: "exceeded its CPU time limit (JOB_EXEC_KILL_CPUT)",
    -29: "exceeded its walltime (JOB_EXEC_KILL_WALLTIME)",
    -31: "exceeded its high-bandwidth memory limit (JOB_EXEC_KILL_HPMEM)",
}

def parse_qstat_json(text: str) -> dict[str, dict[str, str]]:
    """`qstat -f -F json` as {job id: {attribute: value}}, nested resources flattened ("Resource_List.walltime")
    the way plain `qstat -f` spells them. Variable_List (the job's environment) is left out on purpose."""
    if not text.strip():
        return {}
    try:
        document = json.loads(text, strict=False)
    except ValueError:
        # Older PBS Pro releases print environment values unescaped; the environment is not needed here.
        cleaned = re.sub(r'"Variable_List"\s*:\s*\{[^{}]*\}\s*,?', "", text)
        try:
            document = json.loads(cleaned, strict=False)
        except ValueError as exc:
            raise BackendError(f"qstat printed JSON that does not parse ({exc}): {text[:300]!r}") from None
    if not isinstance(document, dict):
        raise BackendError(f"qstat printed unexpected JSON: {text[:300]!r}")
    jobs = document.get("Jobs") or {}
    result: dict[str, dict[str, str]] = {}
    for job_id, attributes in jobs.items():
        if not isinstance(attributes, dict):
            continue
        flat: dict[str, str] = {}
        for key, value in attributes.items():
            if key == "Variable_List" or value is None:
                continue
            if isinstance(value, dict):
                for sub, sub_value in value.items():
                    if sub_value is not None:
                        flat[f"{key}.{sub}"] = str(sub_value)
            else:
                flat[key] = str(value)
        result[str(job_id)] = flat
    return result


def judge_pbspro(job_id: str, a: Mapping[str, str], entry: IndexEntry | None) -> Observation:
    code = a.get("job_state", "").strip()
    comment = a.get("comment", "")
    nodes = _int(a.get("Resource_List.nodect"))
    started = parse_time(a.get("stime"))
    raw = _raw(a, entry)
    if code in _PBSPRO_PENDING:
        reason = comment or _PBSPRO_PENDING[code]
        if code == "H" and "held" not in reason.lower():
            reason = f"held: {reason}"
        return Observation(job_id, State.PENDING, reason=reason, nodes=nodes, raw=raw)
    if code not in _PBSPRO_FINAL:
        return Observation(job_id, State.RUNNING, reason=_PBSPRO_RUNNING.get(code, f"state {code}"),
                           started_at=started, nodes=nodes, raw=raw)
    ended = parse_time(a.get("obittime")) or parse_time(a.get("mtime"))
    used = parse_duration(a.get("resources_used.walltime"))
    state, exit_code, reason = _pbspro_outcome(a, entry, started, used)
    return Observation(job_id, state, reason=reason, exit_code=exit_code, started_at=started, ended_at=ended,
                       elapsed_seconds=_elapsed(used, started, ended), nodes=nodes, raw=raw)


def _pbspro_outcome(
    a: Mapping[str, str], entry: IndexEntry | None, started: datetime | None, used: int | None
) -> tuple[State, int | None, str]:
    """A finished PBS Pro job. Exit_status: 0-255 the script's own; 256+N killed by signal N; negative a
    JOB_EXEC_* code (-29 since OpenPBS 20: killed for its walltime). Substate 91 means deleted (qdel); the comment
    ends "and finished", "and failed", "and exceeded resource walltime" or "and terminated [by user@host]"."""
    comment = a.get("comment", "")
    status = _int(a.get("Exit_status"))
    limit = parse_duration(a.get("Resource_List.walltime"))
    terminated = _int(a.get("substate")) == _SUBSTATE_TERMINATED or " and terminated" in comment
    cancel_asked = entry is not None and entry.cancel_requested
    code = None if status is None or status < 0 else _exit_code(status)
    if terminated:
        who = comment.rsplit(" and terminated by ", 1)[1] if " and terminated by " in comment else ""
        where = "while running" if started else "before it started"
        return State.CANCELLED, code, f"deleted (qdel{' by ' + who if who else ''}) {where}"
    if status == _JOB_EXEC_KILL_WALLTIME or "exceeded resource walltime" in comment:
        return State.TIMED_OUT, None, _walltime_reason(used, limit)
    if status is None:
        if started is None:
            return State.CANCELLED, None, "left the queue without running"
        return State.FAILED, None, comment or "finished without an exit status"
    if a.get("array", "").lower() == "true":
        # An array's own Exit_status sums up its subjobs: 0 all exited 0, 1 one exited non-zero, 2 one was
        # ended by PBS (OpenPBS array_func.c).
        if status == 0:
            return State.COMPLETED, 0, ""
        what = "was ended by PBS" if status == 2 else "exited non-zero"
        return State.FAILED, None, f"at least one subjob {what} ({a.get('array_state_count', '').strip()})"
    if status > 128:
        # Before OpenPBS 20 a walltime kill was only a SIGTERM/SIGKILL, seen as 256+signal (or 128+signal when
        # the top shell outlived its child).
        if limit is not None and used is not None and used >= limit:
            return State.TIMED_OUT, code, _walltime_reason(used, limit)
        if cancel_asked:
            return State.CANCELLED, code, "cancelled (qdel)"
        if status >= 256:
            return State.FAILED, code, _signal_reason(status)
    if status < 0:
        what = _PBSPRO_EXEC_CODES.get(status, f"was ended by PBS (exit status {status})")
        return State.FAILED, None, f"the job {what}"
    if status == 0:
        return State.COMPLETED, 0, ""
    return State.FAILED, status, _exit_reason(status)


class PBSProBackend(PBSBase):
    flavour = "pbspro"
    default_account_option = "-P"
    qstat = "qstat -f -F json -x"
    parse_qstat = staticmethod(parse_qstat_json)

    def __init__(self, transport, settings: Mapping[str, object] | None = None) -> None:
        super().__init__(transport, settings)
        self.direct_write = bool(self.settings.get("direct_write", True))

    def resource_directives(self, spec: JobSpec, mapping: Mapping[str, str]) -> list[str]:
        res = spec.resources
        chunk = [str(res.nodes), f"ncpus={self._cpus(spec)}"]
        if res.gpus_per_node:
            chunk.append(f"ngpus={res.gpus_per_node}")
        if res.memory_gb:
            chunk.append(f"mem={res.memory_gb}gb")
        if spec.launcher != Launcher.SCRIPT:
            # PBS_NODEFILE then lists each host once per process, which is what mpirun's hostfile expects.
            chunk.append(f"mpiprocs={spec.procs}")
        if extra := mapping.get("select"):
            chunk.append(_checked("select resources", extra, _CHUNK_RE))
        lines = [f"-l select={':'.join(chunk)}", f"-l walltime={hms(spec.walltime_seconds)}"]
        # Without a place statement PBS Pro may pack several chunks onto one host.
        place = mapping.get("place") or ("scatter" if res.nodes > 1 else "")
        if place:
            lines.append(f"-l place={_checked('place', place, _PLACE_RE)}")
        return lines

    def output_directives(self) -> list[str]:
        return [f"-o {STDOUT_FILE}", f"-e {STDERR_FILE}", *(["-k oed"] if self.direct_write else [])]

    def find_lookup(self, quoted_name: str) -> str:
        return f'qselect -x -u "$(id -un)" -N {quoted_name} 2>/dev/null'

    def judge(self, job_id: str, attributes: Mapping[str, str], entry: IndexEntry | None,
              now: datetime | None) -> Observation:
        return judge_pbspro(job_id, attributes, entry)
