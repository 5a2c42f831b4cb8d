"""The lifecycle's two writers leave the same rows: PostgreSQL's one-statement writer and the portable one `make
run`'s SQLite uses (portal/jobs/transitions.py chooses between them in one place). The portable writer is run here
directly, on the same database, through the same four verbs, and every job field and event the verbs write is
compared with what the PostgreSQL writer wrote for the same story."""

from __future__ import annotations

import pytest
from django.db import transaction
from django.utils import timezone

from portal.jobs import events, transitions
from portal.jobs.actions.submit import prepare_job, record_jobs
from portal.jobs.actions.validation import JobRequest
from portal.jobs.causes import Cause
from portal.jobs.models import Job, JobEvent, JobState

pytestmark = pytest.mark.django_db(transaction=True)

COMPARED = ("name", "state", "state_reason", "scheduler_id", "cancel_reason", "cancel_cause", "exit_code",
            "dispatch_attempts", "cost_amount")


def _story(site, writer, prefix: str) -> tuple[list[tuple], list[tuple]]:
    """Three jobs recorded, handed over (a compare-and-swap), accepted, one noted, one ended, one refused."""
    jobs = []
    for n in range(3):
        job = prepare_job(site.alice, JobRequest(project=site.project, name=f"{prefix}{n}", script="true",
                                                 hardware=site.hardware, walltime="00:05:00")).job
        jobs.append(job)
    original = transitions._writer
    transitions._writer = lambda: writer
    try:
        with transaction.atomic():
            record_jobs(jobs, events.submitted(site.alice), dispatch=[])
        with transaction.atomic():
            lease = timezone.now()
            transitions.apply([transitions.Move(j, JobState.SUBMITTING, events.handing_over(),
                                                {"dispatch_lease_until": lease, "dispatch_attempts": 1}) for j in jobs])
        with transaction.atomic():
            made = transitions.apply([transitions.Move(j, JobState.PENDING, events.accepted(f"{prefix}-{i}"),
                                                       {"scheduler_id": f"{prefix}-{i}", "dispatch_lease_until": None})
                                      for i, j in enumerate(jobs[:2])], expect=JobState.SUBMITTING)
            assert len(made) == 2
            # Nothing moves a job no longer in the state expected.
            assert transitions.apply([transitions.Move(jobs[0], JobState.PENDING, events.accepted("again"))],
                                     expect=JobState.SUBMITTING) == []
        with transaction.atomic():
            ask = events.by_person(site.alice, owner=True, project=site.project.slug)
            transitions.note(jobs[0], events.cancel_asked(ask), cancel_requested_at=timezone.now(),
                             cancel_reason=ask.words, cancel_cause=ask.cause)
        with transaction.atomic():
            locked = Job.objects.select_for_update(of=("self",)).select_related("hardware").get(pk=jobs[1].pk)
            transitions.apply([transitions.Move(locked, JobState.RUNNING, events.seen(JobState.RUNNING))])
        with transaction.atomic():
            locked = Job.objects.select_for_update(of=("self",)).select_related("hardware").get(pk=jobs[2].pk)
            transitions.apply([transitions.Move(locked, JobState.FAILED, events.refused_by_scheduler("no such queue"),
                                                {"ended_at": timezone.now()})])
    finally:
        transitions._writer = original
    rows = [tuple(getattr(job, name) for name in COMPARED)
            for job in Job.objects.filter(pk__in=[j.pk for j in jobs]).order_by("pk")]
    history = [(e.job.name, e.from_state, e.to_state, e.cause, e.reason, e.data, e.actor_id)
               for e in JobEvent.objects.filter(job__in=jobs).select_related("job").order_by("pk")]
    return ([tuple(str(v).replace(prefix, "·") for v in row) for row in rows],
            [tuple(str(v).replace(prefix, "·") for v in event) for event in history])


def test_the_portable_writer_leaves_the_rows_the_postgresql_writer_leaves(local_site, no_live_worker):
    # No live worker: the story leaves jobs handed over with a lease already run out, which its beat's recovery sweep
    # would dispatch again (an event more in one writer's history; seen once in a run of four workers).
    postgres = _story(local_site, transitions._POSTGRES, "pg")
    portable = _story(local_site, transitions._PORTABLE, "sq")
    assert portable == postgres
    jobs, history = postgres
    assert [row[1] for row in jobs] == ["pending", "running", "failed"]
    assert [event[3] for event in history if event[0] == "·0"] == [
        Cause.SUBMITTED, Cause.DISPATCHED, Cause.DISPATCHED, Cause.CANCEL_REQUESTED]


def test_a_recorded_job_reads_back_as_it_was_prepared_to_the_microsecond(local_site, no_live_worker):
    # The PostgreSQL writer sends the new rows as one JSON parameter: every column must read back as the job in
    # memory holds it (times with their microseconds, the estimate's decimals, JSON columns, a null notebook).
    jobs = [prepare_job(local_site.alice, JobRequest(
        project=local_site.project, name=f"exact{n}", script="echo 'quotes' \"and\" \\back\n\tand tabs é",
        hardware=local_site.hardware, walltime="00:05:00", env={"LR": "0.1", "NOTE": "日本"},
        parameters={"lr": 0.5, "layers": [1, 2], "nested": {"on": True, "off": None}})).job for n in range(2)]
    with transaction.atomic():
        record_jobs(jobs, events.submitted(local_site.alice), dispatch=[])
    for job in jobs:
        stored = Job.objects.get(pk=job.pk)
        for column in Job._meta.concrete_fields:
            assert getattr(stored, column.attname) == getattr(job, column.attname), column.name
        assert stored.created_at.microsecond == job.created_at.microsecond and stored.notebook is None
        assert stored.estimate_amount == job.estimate_amount and stored.estimate_amount is not None
