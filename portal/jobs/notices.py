"""What people are told when jobs move, decided from the cause of the event that moved them (never its words),
and delivered through portal/notifications (the bell, email after commit, each person's choices).

- A job that ends or is lost tells its owner what happened: completed, failed, ran out of time, lost, cancelled
  by someone else (a project admin, someone on the cluster outside Kakehashi, the cloud reconciler) or by the
  project's strict budget (with its figures). A cancel you asked for yourself tells you nothing.
- A sweep's points are not told one by one: its owner is told once, when its last point ends, with the counts.

Called by portal/jobs/transitions.py inside the transaction that moves the jobs: a rolled-back move tells nobody.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence

from django.db.models import Count
from django.utils import timezone

from portal.jobs.causes import Cause
from portal.jobs.events import Event
from portal.jobs.models import ACTIVE_STATES, FINAL_STATES, Job, JobGroup, JobState
from portal.notifications.actions import Notice, tell
from portal.notifications.models import Kind
from portal.projects.models import Project

_BY_STATE = {JobState.COMPLETED: Kind.ENDED, JobState.FAILED: Kind.FAILED, JobState.TIMED_OUT: Kind.TIMED_OUT,
             JobState.LOST: Kind.LOST, JobState.CANCELLED: Kind.CANCELLED}


def kind_of(to: str, event: Event) -> str | None:
    """What a job's owner is told of its move to `to` for `event`'s cause; None: nothing."""
    if event.cause == Cause.CANCELLED_BY_OWNER:
        return None  # they did it themselves
    if event.cause == Cause.CANCELLED_BY_BUDGET:
        return Kind.BUDGET
    if event.cause == Cause.CANCELLED_IDLE:
        return Kind.IDLE
    if event.cause in (Cause.CANCELLED_BY_ADMIN, Cause.CANCELLED_OUTSIDE, Cause.RECONCILER):
        return Kind.CANCELLED
    return _BY_STATE.get(to)


def _sentence(job: Job, slug: str, to: str, kind: str, event: Event) -> str:
    # A session is told as one ("Session lab1 (vision) stopped by the project's strict budget …").
    name = f"{'Session' if job.kind == Job.Kind.SESSION else 'Job'} {job.name} ({slug})"
    if kind == Kind.ENDED:
        return f"{name} completed"
    if kind == Kind.FAILED:
        return f"{name} failed: {event.text}"
    if kind == Kind.LOST:
        return f"{name} is lost: {event.text}"
    return f"{name} {event.text}"  # "ran out of its walltime: …", "cancelled by …", "stopped by …"


def after_moves(moves: Sequence[tuple[Job, str, Event]]) -> None:
    """Tell the owners of jobs that ended or were lost, and of sweeps whose last point ended."""
    told = [(job, to, event, kind) for job, to, event in moves
            if (kind := kind_of(to, event)) and (job.group_id is None or to == JobState.LOST)]
    ended_sweeps = {job.group_id for job, to, _ in moves if to in FINAL_STATES and job.group_id}
    if not told and not ended_sweeps:
        return
    notices: list[Notice] = []
    if told:
        slugs = dict(Project.objects.filter(pk__in={job.project_id for job, *_ in told}).values_list("pk", "slug"))
        notices += [Notice(user_id=job.user_id, kind=kind, text=_sentence(job, slugs.get(job.project_id, ""), to,
                                                                         kind, event),
                           link=f"/jobs/{job.pk}/", job_id=job.pk, project_id=job.project_id)
                    for job, to, event, kind in told]
    notices += sweeps_ended(ended_sweeps)
    tell(notices)


def sweeps_ended(group_ids: set[int]) -> list[Notice]:
    """One notice per sweep whose every point has now ended, the first time only: the sweeps' rows are locked
    (after their jobs', as the lock order says) so that two transactions ending its last two points cannot both
    miss, or both tell, the end. A fixed number of statements however many sweeps."""
    if not group_ids:
        return []
    groups = list(JobGroup.objects.select_for_update(of=("self",)).select_related("project")
                  .filter(pk__in=sorted(group_ids), ended_told_at__isnull=True).order_by("pk"))
    if not groups:
        return []
    counts: dict[int, Counter] = defaultdict(Counter)
    rows = (Job.objects.filter(group_id__in=[g.pk for g in groups]).order_by()
            .values_list("group_id", "state").annotate(n=Count("pk")))
    for group_id, state, n in rows:
        counts[group_id][state] = n
    ended = [g for g in groups if not any(state in ACTIVE_STATES for state in counts[g.pk])]
    if not ended:
        return []
    JobGroup.objects.filter(pk__in=[g.pk for g in ended]).update(ended_told_at=timezone.now())
    notices = []
    for group in ended:
        tally = counts[group.pk]
        said = ", ".join(f"{tally[state]} {JobState(state).label.lower()}" for state in
                         (JobState.COMPLETED, JobState.FAILED, JobState.TIMED_OUT, JobState.CANCELLED) if tally[state])
        kind = Kind.SWEEP if set(tally) == {JobState.COMPLETED} else Kind.SWEEP_FAILED
        notices.append(Notice(user_id=group.user_id, kind=kind,
                              text=f"Sweep {group.name} ({group.project.slug}) ended: {said}",
                              link=f"/jobs/groups/{group.pk}/", sweep_id=group.pk, project_id=group.project_id))
    return notices
