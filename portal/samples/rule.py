"""The idle rule, decided from a job's series: plain typed functions, no database (tests/samples/test_rule.py
runs them on series Hypothesis generates).

Fail safe: a GPU is idle only if every one of its samples in the window is known and below the threshold, and the
window is covered by fresh samples of every GPU. No samples, stale samples, a node without nvidia-smi, an
[N/A] utilisation (a MIG-enabled GPU): the job is "unknown", never idle. A job with at least `exempt_busy_gpus`
busy GPUs is busy; with fewer, but some, it is "partly idle" (told, never cancelled); with none, idle.

An interactive session is also a person's JupyterLab: it is idle only when its server has seen no activity for the
whole window (the hub's `last_activity` of its named server, which jupyterhub-singleuser reports) AND its GPUs are
idle by the rule above (a session that reserves no GPU: the activity alone). Activity the hub did not give (the hub
away, no `last_activity`): "unknown", never idle (docs/decisions/0055).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from portal.samples.series import DT, UTIL_MAX, T

BUSY, IDLE, PARTLY_IDLE, UNKNOWN, EXEMPT = "busy", "idle", "partly_idle", "unknown", "exempt"
TELL, CANCEL = "tell", "cancel"
MAX_EVIDENCE = 64  # samples kept on a warning's or a cancel's event


@dataclass(frozen=True)
class Rule:
    threshold_percent: float = 5.0
    window_seconds: int = 3600
    warn_at_seconds: tuple[int, ...] = (3600, 6300)
    action: str = TELL
    cancel_after_seconds: int = 7200
    keep_max_hours: int = 24
    exempt_busy_gpus: int = 1
    exempt_users: frozenset[str] = field(default_factory=frozenset)
    exempt_hardware: frozenset[str] = field(default_factory=frozenset)
    exempt_sessions_under_hours: float = 0.0
    source: str = "site"  # where it comes from: "site" (the default) or "project <slug>"


@dataclass(frozen=True)
class JobFacts:
    username: str
    hardware: str  # the hardware type's slug
    gpus_reserved: int
    is_session: bool = False
    walltime_seconds: int = 0
    # A session: when its Jupyter server was last used, as the hub says (epoch seconds); None: not known.
    last_activity: int | None = None
    # A session: when its server came up (its report; the job's start if it never reported), epoch seconds. Nobody
    # can use a session before: the hub's activity of a server that waited in the queue is older.
    ready_at: int | None = None


@dataclass(frozen=True)
class Verdict:
    state: str
    why: str
    idle_since: int | None = None  # epoch seconds: since when every GPU has been below the threshold
    busy_gpus: int = 0
    idle_gpus: int = 0
    evidence: tuple[tuple[str, int, float | None], ...] = ()  # (device, t, utilisation max) in the window
    last_activity: int | None = None  # a session: its server's last activity (epoch seconds), the other evidence


def exemption(rule: Rule, job: JobFacts) -> str:
    """Why the rule leaves this job alone, or ""."""
    if job.gpus_reserved <= 0 and not job.is_session:
        return "it reserves no GPU"
    if job.username in rule.exempt_users:
        return f"{job.username} is exempt"
    if job.hardware in rule.exempt_hardware:
        return f"hardware {job.hardware} is exempt"
    if job.is_session and rule.exempt_sessions_under_hours and \
            job.walltime_seconds < rule.exempt_sessions_under_hours * 3600:
        return f"interactive sessions under {rule.exempt_sessions_under_hours:g} hours are exempt"
    return ""


def judge(series: dict, rule: Rule, job: JobFacts, now: int) -> Verdict:
    """Busy, idle, partly idle, unknown or exempt, from the samples of the last `window_seconds` (and, for a
    session, its server's last activity)."""
    if why := exemption(rule, job):
        return Verdict(EXEMPT, why)
    if job.is_session:
        return judge_session(series, rule, job, now)
    return judge_gpus(series, rule, now)


def _clock(epoch: int) -> str:
    return f"{datetime.fromtimestamp(epoch, UTC):%Y-%m-%d %H:%M:%S} UTC"


def judge_session(series: dict, rule: Rule, job: JobFacts, now: int) -> Verdict:
    """A session is idle when nobody used its JupyterLab for the whole window and its GPUs are idle (or it has
    none); since the later of the two. Used within the window: busy, whatever its GPUs do."""
    if job.last_activity is None:
        return Verdict(UNKNOWN, "the hub has not said when this session was last used")
    last = max(job.last_activity, job.ready_at or 0)  # its start counts as a use
    if now - last < rule.window_seconds:
        return Verdict(BUSY, f"used in JupyterLab within the window (last activity {_clock(last)})",
                       last_activity=last)
    unused = f"no activity in JupyterLab since {_clock(last)}"
    if job.gpus_reserved <= 0:
        return Verdict(IDLE, f"{unused}; it reserves no GPU", idle_since=last, last_activity=last)
    gpus = judge_gpus(series, rule, now)
    if gpus.state != IDLE:
        return replace(gpus, why=f"{gpus.why} ({unused})", last_activity=last)
    return replace(gpus, why=f"{unused}; {gpus.why}", idle_since=max(gpus.idle_since or last, last),
                   last_activity=last)


def judge_gpus(series: dict, rule: Rule, now: int) -> Verdict:
    """The GPUs' verdict from the samples of the last `window_seconds` (fail safe, as the module says)."""
    devices = series.get("gpus") or {}
    nodes = series.get("nodes") or {}
    if not devices:
        return Verdict(UNKNOWN, "no GPU samples yet")
    if blind := sorted(node for node, info in nodes.items() if not info.get("nvidia_smi")):
        return Verdict(UNKNOWN, f"no nvidia-smi on {', '.join(blind)}")
    interval = max(int(series.get("interval") or 30), 1)
    start = now - rule.window_seconds
    busy, evidence, quiet_since = 0, [], []
    for device, data in sorted(devices.items()):
        points = data.get("p") or []
        if not points or points[0][T] > start + 2 * interval:
            return Verdict(UNKNOWN, f"samples of {device} do not cover the window yet")
        if points[-1][T] + points[-1][DT] < now - 3 * interval:
            return Verdict(UNKNOWN, f"no fresh samples of {device}")
        window = [p for p in points if p[T] + p[DT] > start]
        if any(p[UTIL_MAX] is None for p in window):
            return Verdict(UNKNOWN, f"the utilisation of {device} is not known (nvidia-smi says [N/A])")
        evidence += [(device, p[T], p[UTIL_MAX]) for p in window]
        if any(p[UTIL_MAX] >= rule.threshold_percent for p in window):
            busy += 1
            continue
        last_busy = max((p[T] + p[DT] for p in points if p[UTIL_MAX] is not None
                         and p[UTIL_MAX] >= rule.threshold_percent), default=points[0][T])
        quiet_since.append(last_busy)
    idle = len(devices) - busy
    kept = tuple(evidence[-MAX_EVIDENCE:])
    if busy >= max(rule.exempt_busy_gpus, 1):
        return Verdict(BUSY, f"{busy} of {len(devices)} GPUs busy", busy_gpus=busy, idle_gpus=idle)
    if busy:
        return Verdict(PARTLY_IDLE, f"only {busy} of {len(devices)} GPUs busy", busy_gpus=busy, idle_gpus=idle,
                       evidence=kept)
    return Verdict(IDLE, f"all {idle} GPUs below {rule.threshold_percent:g} % for the whole window",
                   idle_since=max(quiet_since), idle_gpus=idle, evidence=kept)


@dataclass(frozen=True)
class Steps:
    warn_at: tuple[int, ...] = ()  # the warnings (seconds of idleness) due now
    cancel: bool = False


def next_steps(verdict: Verdict, rule: Rule, now: int, *, warned: tuple[int, ...] = (),
               keep_until: int | None = None) -> Steps:
    """What is due for an idle job: the warnings not sent yet whose time has come, and the cancel once idle for
    `cancel_after_seconds` (only with action "cancel", and only after every earlier warning went out in an earlier
    cycle: nobody is cancelled without having been told). A keep restarts the clock at its end."""
    if verdict.state != IDLE or verdict.idle_since is None:
        return Steps()
    since = max(verdict.idle_since, keep_until or 0)
    if keep_until is not None and now < keep_until:
        return Steps()
    idle_for = now - since
    due = tuple(w for w in sorted(rule.warn_at_seconds) if w <= idle_for and w not in warned)
    told_before = all(w in warned for w in rule.warn_at_seconds if w <= rule.cancel_after_seconds)
    cancel = rule.action == CANCEL and idle_for >= rule.cancel_after_seconds and told_before
    return Steps(due, cancel)
