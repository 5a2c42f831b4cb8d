"""The one way a Job changes state: `transition` on a locked row, in the caller's transaction.

It checks the move against ALLOWED_TRANSITIONS, writes the JobEvent, and when the job ends settles its cost and
asks a worker to bring its output home.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import transaction
from django.utils import timezone

from portal.budgets import actions as budgets
from portal.catalog import job_templates
from portal.jobs.models import FINAL_STATES, Job, JobEvent, JobState


def transition(job: Job, to: str, *, reason: str = "", actor=None, **fields: Any) -> None:
    """Move a locked job to `to`, write its event, and settle money when it ends. Inside a transaction."""
    job.check_transition(to)
    from_state = job.state
    job.state = to
    job.state_reason = reason
    for name, value in fields.items():
        setattr(job, name, value)
    job.save()
    JobEvent.objects.create(job=job, from_state=from_state, to_state=to, reason=reason, actor=actor)
    if to in FINAL_STATES:
        _settle(job)
        if job.scheduler_id:
            # Keep the final stdout/stderr in the portal: the cluster's copy may be purged later.
            job_id = job.pk
            transaction.on_commit(lambda: _enqueue_fetch_output(job_id))
            template = job_templates.get(job.template)
            if template is not None and template.records_health and to == JobState.COMPLETED:
                transaction.on_commit(lambda: _enqueue_health_record(job_id))


def transition_many(jobs: Sequence[Job], to: str, *, reason: str, actor=None, also: Sequence[str] = (),
                    **fields: Any) -> None:
    """`transition` for many locked jobs at once (a sweep's array): one UPDATE and one INSERT of events.

    Only for moves that end nothing: an ending settles money job by job, through `transition`. `also` names
    fields the caller already set on each job to a value of its own (e.g. its element's scheduler id).
    """
    if to in FINAL_STATES:
        raise ValueError("endings go through transition(), one job at a time")
    if not jobs:
        return
    now = timezone.now()
    events = []
    for job in jobs:
        job.check_transition(to)
        events.append(JobEvent(job=job, from_state=job.state, to_state=to, reason=reason, actor=actor))
        job.state, job.state_reason, job.updated_at = to, reason, now
        for name, value in fields.items():
            setattr(job, name, value)
    Job.objects.filter(pk__in=[job.pk for job in jobs]).update(state=to, state_reason=reason, updated_at=now, **fields)
    if also:
        Job.objects.bulk_update(jobs, list(also))
    JobEvent.objects.bulk_create(events)


def _enqueue_health_record(job_id: int) -> None:
    from portal.jobs.tasks import record_health_check_task

    record_health_check_task.delay(job_id)


def _enqueue_fetch_output(job_id: int) -> None:
    from portal.jobs.tasks import fetch_output_task

    fetch_output_task.delay(job_id)


def _settle(job: Job) -> None:
    actual = None
    if job.hardware is not None and job.estimate_unit:
        seconds = job.elapsed_seconds or 0
        actual = budgets.cost(job.hardware.rate, job.hardware.rate_unit, job.nodes, seconds, job.estimate_unit).amount
        job.cost_amount = actual
        job.save(update_fields=["cost_amount"])
    budgets.settle(job, actual)


def locked_job(job_id: int) -> Job:
    return Job.objects.select_for_update(of=("self",)).select_related("project", "cluster", "hardware").get(pk=job_id)
