"""The one writer of JobEvent rows: a job's history, as its page shows it (Saleor's `order/events.py` shape).

Every event says when, why and (when a person did it) who. State changes are written by `transitions`; what
changes no state (a cancel asked for, a stuck queue entry deleted) is a note here too, so the history is whole.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from portal.jobs.models import Job, JobEvent, JobState

MAX_REASON = 2000


def submitted(jobs: Sequence[Job], *, reason: str, actor=None) -> None:
    """The first event of newly recorded jobs: they are queued."""
    JobEvent.objects.bulk_create(
        JobEvent(job=job, from_state="", to_state=JobState.QUEUED, reason=reason, actor=actor) for job in jobs
    )


def moved(moves: Iterable[tuple[Job, str]], to: str, *, reason: str, actor=None) -> None:
    """Jobs moved from the state given with each of them to `to`."""
    JobEvent.objects.bulk_create(
        JobEvent(job=job, from_state=from_state, to_state=to, reason=reason, actor=actor) for job, from_state in moves
    )


def noted(job: Job, reason: str, *, actor=None) -> None:
    """Something that happened to a job without changing its state."""
    JobEvent.objects.create(job=job, from_state=job.state, to_state=job.state, reason=reason[:MAX_REASON], actor=actor)


def moved_each(history: Iterable[tuple[Job, str, str, str]], *, actor=None) -> None:
    """Jobs moved each from its own state to its own state for its own reason: (job, from, to, reason)."""
    JobEvent.objects.bulk_create(
        JobEvent(job=job, from_state=from_state, to_state=to, reason=reason[:MAX_REASON], actor=actor)
        for job, from_state, to, reason in history
    )
