"""A Job only moves along allowed transitions, and every move is recorded with its time."""

from __future__ import annotations

import pytest
from django.db import transaction

from portal.jobs import events
from portal.jobs.actions.cancel import request_cancel
from portal.jobs.actions.submit import submit_job
from portal.jobs.actions.sweeps import submit_sweep
from portal.jobs.actions.validation import JobRequest
from portal.jobs.models import ALLOWED_TRANSITIONS, IllegalTransition, Job, JobEvent, JobState
from portal.jobs.transitions import Move, apply

pytestmark = pytest.mark.django_db


@pytest.fixture
def job(local_site):
    submission = submit_job(
        local_site.alice,
        JobRequest(project=local_site.project, name="sm", script="true", hardware=local_site.hardware, walltime="00:05:00"),
    )
    return submission.job


def test_an_illegal_transition_is_an_error_not_an_overwrite(job):
    with pytest.raises(IllegalTransition):
        with transaction.atomic():
            apply([Move(Job.objects.select_for_update().get(pk=job.pk), JobState.COMPLETED, events.lost())])
    job.refresh_from_db()
    assert job.state == JobState.QUEUED
    assert list(job.events.values_list("to_state", flat=True)) == ["queued"]


def test_final_states_allow_no_further_transition():
    for state in (JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED, JobState.TIMED_OUT):
        assert ALLOWED_TRANSITIONS[state] == frozenset()


def test_every_transition_is_recorded_with_time_cause_and_words(job, local_site):
    with transaction.atomic():
        apply([Move(Job.objects.select_for_update().get(pk=job.pk), JobState.SUBMITTING, events.handing_over())])
    history = list(JobEvent.objects.filter(job=job))
    assert [(e.from_state, e.to_state, e.cause) for e in history] == [
        ("", "queued", "submitted"), ("queued", "submitting", "dispatched")]
    assert history[1].reason == "handing to the scheduler" and history[0].actor == local_site.alice
    assert history[0].at <= history[1].at


def test_cancelling_a_queued_job_ends_it_at_once_and_releases_its_reservation(job, local_site):
    from portal.budgets.actions import summary

    assert summary(local_site.budget).reserved > 0
    request_cancel(job, local_site.alice)
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED
    after = summary(local_site.budget)
    assert after.reserved == 0 and after.spent == 0 and after.available == local_site.budget.amount


def test_an_outsider_cannot_cancel(job, local_site):
    from django.core.exceptions import PermissionDenied

    with pytest.raises(PermissionDenied):
        request_cancel(job, local_site.mallory)
    job.refresh_from_db()
    assert job.state == JobState.QUEUED


def test_the_queues_word_alone_ends_a_job_only_after_accounting_had_its_grace_period(job, settings):
    from datetime import timedelta

    from django.utils import timezone

    from portal.jobs.tracking import _accounting_overdue

    settings.KAKEHASHI_ACCOUNTING_GRACE_SECONDS = 15
    first = timezone.now()
    assert not _accounting_overdue(job, first)
    assert not _accounting_overdue(job, first + timedelta(seconds=14))
    assert _accounting_overdue(job, first + timedelta(seconds=15))
    settings.KAKEHASHI_ACCOUNTING_GRACE_SECONDS = 0
    other = Job.objects.create(**{f.name: getattr(job, f.name) for f in Job._meta.concrete_fields
                                  if f.name not in {"id", "uuid", "idempotency_key"}})
    assert _accounting_overdue(other, first)


def test_moving_many_jobs_at_once_checks_each_move_and_records_each_event_with_its_cause(local_site):
    from portal.jobs import events
    from portal.jobs.transitions import Move, apply

    req = JobRequest(project=local_site.project, name="many", script="true", hardware=local_site.hardware,
                     walltime="00:05:00")
    jobs = [job for job in submit_sweep(local_site.alice, req, {"N": [1, 2, 3]}).group.jobs.order_by("pk")]
    handing = events.handing_over(array=True)
    with transaction.atomic():
        apply([Move(job, JobState.SUBMITTING, handing) for job in jobs])
    assert set(Job.objects.filter(pk__in=[j.pk for j in jobs]).values_list("state", flat=True)) == {"submitting"}
    for job in jobs:
        assert list(job.events.values_list("from_state", "to_state", "cause")) == [
            ("", "queued", "submitted"), ("queued", "submitting", "dispatched")]
    with pytest.raises(IllegalTransition), transaction.atomic():
        apply([Move(job, JobState.QUEUED, handing) for job in jobs])
    with pytest.raises(ValueError, match="endings"), transaction.atomic():
        apply([Move(job, JobState.COMPLETED, handing) for job in jobs], expect=JobState.SUBMITTING)
    assert set(Job.objects.filter(pk__in=[j.pk for j in jobs]).values_list("state", flat=True)) == {"submitting"}
