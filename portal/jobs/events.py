"""What happens to a job, one function per kind of event (Saleor's `order/events.py` vocabulary).

Each function names what happened and returns the `Event` to record: its cause (portal/jobs/causes.py: what
readers switch on), the words a researcher reads on the job page, in the API and the CLI, the evidence (`data`:
the scheduler's record, the budget's figures) and who did it (`actor`, None when the portal, the scheduler or a
rule did). `portal/jobs/transitions.py` writes them, with the state change they explain, in one statement; no
other module builds a JobEvent. Words are for people and may change; readers never search them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from backends.base import JobRecord, StagingReport
from portal.jobs.causes import Cause
from portal.jobs.models import JobState
from portal.jobs.outcome import exit_text

MAX_TEXT = 2000


@dataclass(frozen=True, slots=True)
class Event:
    cause: str
    text: str
    data: Mapping[str, Any] = field(default_factory=dict)
    actor: Any = None  # the person who did it; None for the portal, the scheduler or a rule

    @property
    def words(self) -> str:
        return self.text[:MAX_TEXT]


# --------------------------------------------------------------------------------------------- the portal's steps


def submitted(actor, *, sweep: str = "", rerun: bool = False) -> Event:
    """A job recorded, its estimate reserved (the first event of every job)."""
    if rerun:
        return Event(Cause.SUBMITTED, f"re-run of a failed point of sweep {sweep}", {"sweep": sweep, "rerun": True},
                     actor)
    if sweep:
        return Event(Cause.SUBMITTED, f"submitted in sweep {sweep}", {"sweep": sweep}, actor)
    return Event(Cause.SUBMITTED, "submitted", {}, actor)


def handing_over(*, array: bool = False) -> Event:
    """A worker took the job (or the sweep's array) to submit it."""
    return Event(Cause.DISPATCHED, "handing the array to the scheduler" if array else "handing to the scheduler")


def accepted(scheduler_id: str, *, array_id: str = "", found: bool = False) -> Event:
    """The scheduler took the job: its id (found again after a lost reply, or an element of an array)."""
    after = " (found after a lost reply)" if found else ""
    words = f"an element of scheduler array {array_id}{after}" if array_id else f"scheduler id {scheduler_id}{after}"
    data = {"scheduler_id": scheduler_id, "found": found, **({"array_id": array_id} if array_id else {})}
    return Event(Cause.DISPATCHED, words, data)


def refused_by_scheduler(answer: str, *, noun: str = "job") -> Event:
    """The scheduler will never run it (its own words): the job fails before it waits anywhere."""
    return Event(Cause.REFUSED, f"the scheduler refused the {noun}: {answer}", {"by": "scheduler", "answer": answer})


def data_refused(answer: str) -> Event:
    """The job's data could not be given to it (a checksum that does not match, a path outside the root)."""
    return Event(Cause.REFUSED, f"the job's data could not be staged: {answer}", {"by": "data", "answer": answer})


def datasets_staged(names: Sequence[str], report: StagingReport) -> Event:
    """What staging moved for the job's datasets before the submit."""
    data = {"datasets": list(names), "copied_files": report.copied_files, "copied_bytes": report.copied_bytes,
            "reused_files": report.reused_files, "reused_bytes": report.reused_bytes, "in_place": report.in_place,
            "pulled_files": report.pulled_files, "pulled_bytes": report.pulled_bytes,
            "container_files": report.container_files, "container_bytes": report.container_bytes,
            "shared_group": report.shared_group}
    return Event(Cause.STAGED, f"staged dataset(s) {', '.join(names)}: {report.summary()}", data)


# ------------------------------------------------------------------------------------------- the scheduler says


def seen(state: str, words: str = "") -> Event:
    """The scheduler's queue shows the job in a new state (pending, running)."""
    return Event(Cause.SCHEDULER, words or "seen by the scheduler", {"state": str(state)})


def _record_data(rec: JobRecord) -> dict[str, Any]:
    """The scheduler's final record, as evidence (plain JSON values)."""
    return {"state": str(rec.state), "exit_code": rec.exit_code, "signal": rec.signal,
            "elapsed_seconds": rec.elapsed_seconds, "reason": rec.reason, "cancelled_by": rec.cancelled_by}


def ended(to: str, rec: JobRecord, *, cancel_program: str = "") -> Event:
    """Accounting's final record of a job nobody in the portal asked to stop: completed, failed, killed at its
    walltime, or cancelled on the cluster by someone outside Kakehashi (`cancel_program` by `rec.cancelled_by`)."""
    data = _record_data(rec)
    if to == JobState.TIMED_OUT:
        return Event(Cause.WALLTIME, f"ran out of its walltime: {rec.reason or 'killed by the scheduler at its limit'}",
                     data)
    if to == JobState.CANCELLED:
        how = " by ".join(part for part in (cancel_program, rec.cancelled_by) if part)
        return Event(Cause.CANCELLED_OUTSIDE,
                     f"cancelled on the cluster outside Kakehashi{f' ({how})' if how else ''}", data)
    if to == JobState.COMPLETED:
        return Event(Cause.ACCOUNTING, rec.reason or "completed", data)
    return Event(Cause.ACCOUNTING, rec.reason or exit_text(rec.exit_code, rec.signal) or "failed", data)


def cancelled_as_asked(cause: str, words: str, rec: JobRecord | None = None, *, note: str = "") -> Event:
    """A job the portal asked to stop has ended: told as the cancel it was (the owner's, an admin's, the
    budget's, the reconciler's), whatever words the scheduler used for the kill."""
    data = _record_data(rec) if rec is not None else {}
    return Event(cause or Cause.CANCELLED_BY_OWNER, f"{words or 'cancelled by request'}{note}", data)


def lost() -> Event:
    return Event(Cause.LOST, "neither the scheduler's queue nor its accounting knows this job; an admin should check it")


def stuck_entry_deleted() -> Event:
    return Event(Cause.SCHEDULER, "deleted from the scheduler's queue, where it was stuck in an error state",
                 {"deleted": True})


def stuck_entry_not_deleted(error: str) -> Event:
    return Event(Cause.SCHEDULER,
                 f"still in the scheduler's queue in an error state; deleting it failed: {error}", {"error": error})


# -------------------------------------------------------------------------------------------------------- cancels


@dataclass(frozen=True, slots=True)
class CancelAsk:
    """Who or what asks for a cancel, and why: the cause its ending will carry and the words it will say."""

    cause: str
    words: str  # how the ended job says it ("cancelled by alice", the budget's figures)
    data: Mapping[str, Any] = field(default_factory=dict)
    actor: Any = None


def by_person(user, *, owner: bool, project: str) -> CancelAsk:
    if owner:
        return CancelAsk(Cause.CANCELLED_BY_OWNER, f"cancelled by {user}", {"by": str(user)}, user)
    return CancelAsk(Cause.CANCELLED_BY_ADMIN, f"cancelled by {user}, an admin of project {project}",
                     {"by": str(user)}, user)


def by_budget(*, project: str, used: str, amount: str, unit: str, spent: str, running: str) -> CancelAsk:
    words = (f"cancelled by your project's strict budget: {used} of {amount} {unit} used "
             f"(spent {spent} + running jobs {running})")
    return CancelAsk(Cause.CANCELLED_BY_BUDGET, words, {"project": project, "used": used, "amount": amount,
                                                        "unit": unit, "spent": spent, "running": running})


def by_reconciler(why: str) -> CancelAsk:
    return CancelAsk(Cause.RECONCILER, f"stopped by Kakehashi's cloud reconciler: {why}", {"why": why})


def by_idle_rule(*, idle_minutes: float, rule: str, evidence: Sequence, last_activity: str = "",
                 gpus: int = 0) -> CancelAsk:
    """The idle-GPU rule cancels a job whose GPUs stayed below its threshold, after its warnings; a session
    (`last_activity`: when its JupyterLab was last used, as the hub said) also unused for as long."""
    if last_activity:
        return CancelAsk(Cause.CANCELLED_IDLE, f"stopped by the idle rule ({rule}): {_idle(last_activity, gpus)} "
                                               f"for {idle_minutes:.0f} minutes (last used {last_activity})",
                         {"rule": rule, "idle_minutes": round(idle_minutes, 1), "last_activity": last_activity,
                          "samples": [list(e) for e in evidence]})
    return CancelAsk(Cause.CANCELLED_IDLE, f"cancelled by the idle-GPU rule ({rule}): every GPU idle for "
                                           f"{idle_minutes:.0f} minutes", {"rule": rule,
                                                                        "idle_minutes": round(idle_minutes, 1),
                                                                        "samples": [list(e) for e in evidence]})


def _idle(last_activity: str, gpus: int) -> str:
    """What is idle: a job's GPUs; a session's JupyterLab (and its GPUs, if it holds any)."""
    if not last_activity:
        return "every GPU idle"
    return "no activity in JupyterLab and every GPU idle" if gpus else "no activity in JupyterLab"


def cancel_asked(ask: CancelAsk) -> Event:
    """A cancel asked for a job the scheduler has (or is being given): a worker asks the scheduler next."""
    verb = "cancel asked" if ask.actor is not None else "cancel ordered"
    return Event(Cause.CANCEL_REQUESTED, f"{verb}: {ask.words}", {"by": str(ask.cause), **ask.data}, ask.actor)


def cancelled_before_submission(ask: CancelAsk) -> Event:
    """A job still in the portal's queue ends at once when a cancel is asked."""
    return Event(ask.cause, f"{ask.words}, before it was submitted", dict(ask.data), ask.actor)


def dropped_element_deleted(element: str) -> Event:
    return Event(Cause.SCHEDULER, f"deleted its element {element} of the array, cancelled before submission",
                 {"element": element})


def dropped_element_not_deleted(element: str, error: str) -> Event:
    return Event(Cause.SCHEDULER,
                 f"cancelled before submission, but deleting its element {element} of the array failed: {error}",
                 {"element": element, "error": error})


# ------------------------------------------------------------------------------------------ watching what runs


def reminded(hours: float, threshold_hours: int) -> Event:
    """Its owner was told it has run longer than the project's reminder threshold."""
    return Event(Cause.REMINDER, f"its owner was reminded: running for {hours:.1f} hours "
                                 f"(the project reminds after {threshold_hours})",
                 {"hours": round(hours, 2), "threshold_hours": threshold_hours})


def idle_warned(*, idle_minutes: float, warn_at_minutes: float, rule: str, action_words: str,
                evidence: Sequence, last_activity: str = "", gpus: int = 0) -> Event:
    """Its owner was warned that every GPU of the job has been idle (the samples that show it are the evidence); a
    session's warning also says since when its JupyterLab has not been used (`last_activity`, as the hub said)."""
    used = f" (last used {last_activity})" if last_activity else ""
    return Event(Cause.IDLE_WARNED, f"its owner was warned: {_idle(last_activity, gpus)} for {idle_minutes:.0f} "
                                    f"minutes{used} ({rule}); {action_words}",
                 {"idle_minutes": round(idle_minutes, 1), "warn_at_minutes": warn_at_minutes, "rule": rule,
                  **({"last_activity": last_activity} if last_activity else {}),
                  "samples": [list(e) for e in evidence]})


def idle_kept(user, *, hours: float, until: str, keeps: int, evidence: Sequence) -> Event:
    """Its owner chose to keep it running while idle, for a bounded time: visible to the project's admins."""
    return Event(Cause.IDLE_KEPT, f"kept running while idle by {user} for {hours:g} hours (until {until}); "
                                  f"keep number {keeps}",
                 {"by": str(user), "hours": hours, "until": until, "keeps": keeps,
                  "samples": [list(e) for e in evidence]}, user)

# --------------------------------------------------------------------------------------------- sessions


def session_ready(host: str, port: int) -> Event:
    """An interactive session's server, started on the allocation's first node, reported where it listens."""
    return Event(Cause.SESSION_READY, f"JupyterLab is up on {host}:{port}", {"host": host, "port": port})
