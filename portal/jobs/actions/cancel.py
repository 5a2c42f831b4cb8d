"""Cancel: who may, what a cancel records, and carrying it out on the scheduler (worker side).

A job still in the portal's queue ends at once; any other records the wish and a worker asks the scheduler,
whose accounting then ends the job as cancelled. A person's cancel, a strict budget's and the cloud reconciler's
are the same steps, each with its own cause (portal/jobs/causes.py) and words on record.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from portal.audit.actions import record
from portal.clusters.connect import account_for, backend_for
from portal.enqueue import CANCEL_JOB, enqueue_on_commit
from portal.jobs import events, locks, transitions
from portal.jobs.models import FINAL_STATES, Job, JobGroup, JobState
from portal.projects import access


class CancelError(Exception):
    pass


def may_cancel(user, job: Job) -> bool:
    """The job's owner while they may still submit in its project, or a project admin (`cancellable`'s rule)."""
    return job.pk in cancellable(user, [job])


def cancellable(user, jobs: Sequence[Job]) -> set[int]:
    """The ids of those of `jobs` that `user` may cancel, whatever their state: the job's owner while they may
    still submit in its project, or a project admin (manage_jobs). The rule, once: two small queries of the user's
    roles, however many jobs (a page of the job list)."""
    projects = {job.project_id for job in jobs}
    manage = set(access.projects_where(user, "manage_jobs").filter(pk__in=projects).values_list("pk", flat=True))
    submit = set(access.projects_where(user, "submit").filter(pk__in=projects).values_list("pk", flat=True))
    return {job.pk for job in jobs
            if job.project_id in manage or (job.user_id == user.pk and job.project_id in submit)}


def request_cancel(job: Job, user) -> Job:
    """Record a person's cancel (the job's owner's, or a project admin's). A job still in the portal's queue ends
    at once; others are cancelled on the scheduler. Asking again for a job not ended asks the scheduler again."""
    if not may_cancel(user, job):
        raise PermissionDenied("only the job's owner or a project admin can cancel it")
    ask = events.by_person(user, owner=job.user_id == user.pk, project=job.project.slug)
    return _cancel(job.pk, ask, audit="job.cancel", again=True)


def request_cancel_sweep(group: JobGroup, user) -> list[Job]:
    """Cancel every job of a sweep that has not ended, each as `request_cancel` does (an array's elements are
    cancelled one by one, so each keeps its own record). Returns the jobs whose cancel was recorded."""
    cancelled = []
    for job in Job.objects.filter(group=group).exclude(state__in=FINAL_STATES).order_by("pk"):
        try:
            cancelled.append(request_cancel(job, user))
        except CancelError:
            continue  # it ended meanwhile
    return cancelled


@dataclass
class BulkCancel:
    cancelled: list[Job] = field(default_factory=list)
    refused: list[Job] = field(default_factory=list)  # the user may not cancel these
    ended: list[Job] = field(default_factory=list)  # already over
    unknown: int = 0  # ids the user cannot see (or that do not exist): said as a number, nothing more


def request_cancel_many(user, job_ids: list[int], visible: QuerySet[Job]) -> BulkCancel:
    """Cancel each of these jobs as `request_cancel` does, among `visible` (the jobs the user can see), each in
    its own transaction: one refusal does not undo the others."""
    result = BulkCancel()
    jobs = list(visible.filter(pk__in=job_ids).order_by("pk"))
    result.unknown = len(set(job_ids)) - len(jobs)
    for job in jobs:
        if job.state in FINAL_STATES:
            result.ended.append(job)
            continue
        try:
            result.cancelled.append(request_cancel(job, user))
        except PermissionDenied:
            result.refused.append(job)
        except CancelError:
            result.ended.append(job)
    return result


def cancel_for_budget(job_id: int, ask: events.CancelAsk) -> None:
    """A strict budget is used up: cancel like a person would, with the budget's figures on record (once)."""
    try:
        _cancel(job_id, ask, audit="job.cancel_budget", again=False)
    except CancelError:
        return  # it ended meanwhile


def cancel_by_reconciler(job_id: int, ask: events.CancelAsk) -> None:
    """The cloud reconciler stops a job the cloud runs past its walltime: the job says so when it ends (once)."""
    try:
        _cancel(job_id, ask, audit="job.cancel_reconciler", again=False)
    except CancelError:
        return


def cancel_for_idle(job_id: int, ask: events.CancelAsk) -> bool:
    """The idle-GPU rule stops a job (portal/samples/actions.py), once; settled from accounting like any cancel.
    False if it ended meanwhile."""
    try:
        _cancel(job_id, ask, audit="job.cancel_idle", again=False)
    except CancelError:
        return False
    return True


def _cancel(job_id: int, ask: events.CancelAsk, *, audit: str, again: bool) -> Job:
    """Record the cancel `ask` on the job: a queued job ends at once as cancelled for it; any other keeps it
    (`cancel_cause`, `cancel_reason`: the first cancel's) until the scheduler has stopped it, and a worker asks."""
    with transaction.atomic():
        job = locks.job(job_id)
        if job.state in FINAL_STATES:
            raise CancelError(f"the job already ended ({job.get_state_display()})")
        if job.cancel_requested_at is not None and not again:
            return job
        record(audit, actor=ask.actor, project=job.project, target=job, state=job.state, reason=ask.words,
               cause=str(ask.cause))
        now = timezone.now()
        if job.state == JobState.QUEUED:
            transitions.apply([transitions.Move(job, JobState.CANCELLED, events.cancelled_before_submission(ask), {
                "cancel_requested_at": now, "cancel_reason": ask.words, "cancel_cause": ask.cause, "ended_at": now})])
            return job
        if job.cancel_requested_at is None:
            transitions.note(job, events.cancel_asked(ask), cancel_requested_at=now, cancel_reason=ask.words,
                             cancel_cause=ask.cause)
        if job.scheduler_id:
            enqueue_on_commit(CANCEL_JOB, job.pk)
    return job


def cancel_on_scheduler(job_id: int) -> str:
    """Ask the scheduler to stop a job whose cancel was recorded (worker side)."""
    job = Job.objects.select_related("cluster", "project", "user").get(pk=job_id)
    if job.state in FINAL_STATES or not job.scheduler_id:
        return "nothing to do"
    backend_for(job.cluster, account_for(job.cluster, job.user, job.project)).cancel(job.scheduler_id)
    return "cancel sent"
