"""What AWS Batch's describe_jobs answers mean: a job's state now, and its final record with the seconds it was
billed for. Pure functions, tested on recorded answers (tests/backends/fixtures/aws_batch/, sources in its README).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from backends import aws_batch_defs as defs
from backends.spec import JobRecord, JobStatus, State

QUEUED = frozenset({"SUBMITTED", "PENDING", "RUNNABLE"})
STARTED = frozenset({"STARTING", "RUNNING"})
ENDED = frozenset({"SUCCEEDED", "FAILED"})
# What AWS Batch writes as statusReason for an attempt its timeout stopped (AWS Batch user guide, "Job timeouts").
TIMEOUT_REASON = "Job attempt duration exceeded timeout"


def epoch_millis(value: Any) -> datetime | None:
    """AWS's times are milliseconds since the epoch; 0 or nothing means "not yet"."""
    return datetime.fromtimestamp(value / 1000, UTC) if isinstance(value, int | float) and value > 0 else None


def parse_status(job: Mapping[str, Any]) -> JobStatus:
    """A describe_jobs entry as the queue's view of it."""
    status, reason = job["status"], job.get("statusReason", "")
    if status in QUEUED:
        # RUNNABLE for long usually means no capacity (Spot, GPU quota): say what AWS says.
        return JobStatus(job["jobId"], State.PENDING, f"{status.lower()}{': ' + reason if reason else ''}")
    if status in STARTED:
        return JobStatus(job["jobId"], State.RUNNING, status.lower())
    record = parse_record(job)
    return JobStatus(job["jobId"], record.state, record.reason, record.exit_code)


def parse_record(job: Mapping[str, Any]) -> JobRecord:
    """The final record of an ended job: state, exit code, times, and the seconds it was billed for.

    Every attempt counts (a Spot interruption retried is paid twice): elapsed = Σ (stoppedAt − startedAt) over
    the attempts, which settlement multiplies by the nodes and the price per node-hour.
    """
    attempts = list(job.get("attempts") or [])
    spans = [(epoch_millis(a.get("startedAt")), epoch_millis(a.get("stoppedAt"))) for a in attempts]
    spans = [(start, stop) for start, stop in spans if start and stop]
    if not spans and epoch_millis(job.get("startedAt")) and epoch_millis(job.get("stoppedAt")):
        spans = [(epoch_millis(job["startedAt"]), epoch_millis(job["stoppedAt"]))]
    elapsed = sum(max(int((stop - start).total_seconds()), 0) for start, stop in spans) if spans else None
    container = job.get("container") or {}
    last = (attempts[-1].get("container") or {}) if attempts else {}
    exit_code = container.get("exitCode", last.get("exitCode"))
    reason = job.get("statusReason", "") or last.get("reason", "") or container.get("reason", "")
    interrupted = [a for a in attempts[:-1] if _is_host_loss(a)]
    if job["status"] == "SUCCEEDED":
        state, why = State.COMPLETED, ""
    elif reason.startswith(defs.WALLTIME_REASON):
        state, why = State.TIMED_OUT, reason
    elif reason.startswith((defs.CANCEL_REASON, defs.RECONCILER_REASON)):
        state, why = State.CANCELLED, reason
    elif TIMEOUT_REASON in reason or TIMEOUT_REASON in str(attempts[-1].get("statusReason", "") if attempts else ""):
        state, why = State.TIMED_OUT, f"walltime exceeded ({TIMEOUT_REASON})"
    else:
        state = State.FAILED
        why = f"exit code {exit_code}" if exit_code is not None else "failed"
        if reason:
            why += f": {reason}"
        if attempts and _is_host_loss(attempts[-1]):
            why = f"the instance was taken back (Spot interruption) on the last attempt: {attempts[-1]['statusReason']}"
    if interrupted:
        why = (why + "; " if why else "") + f"{len(interrupted)} attempt(s) lost to Spot interruption and retried"
    nodes = (job.get("nodeProperties") or {}).get("numNodes") or 1
    return JobRecord(
        scheduler_id=job["jobId"], state=state, exit_code=exit_code,
        started_at=spans[0][0] if spans else epoch_millis(job.get("startedAt")),
        ended_at=spans[-1][1] if spans else epoch_millis(job.get("stoppedAt")),
        elapsed_seconds=elapsed, nodes=int(nodes), reason=why,
        raw={"status": job["status"], "attempts": str(len(attempts)), "statusReason": job.get("statusReason", "")},
    )


def _is_host_loss(attempt: Mapping[str, Any]) -> bool:
    # "Host EC2 (instance i-0123456789abcdef0) terminated.": AWS Batch user guide, "Automated job retries".
    return str(attempt.get("statusReason", "")).startswith("Host EC2")
