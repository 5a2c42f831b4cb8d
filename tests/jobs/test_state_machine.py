"""A Job only moves along allowed transitions, and every move is recorded with its time."""

from __future__ import annotations

import pytest
from django.db import transaction

from portal.jobs import actions
from portal.jobs.models import ALLOWED_TRANSITIONS, IllegalTransition, Job, JobEvent, JobState
from portal.jobs.transitions import transition

pytestmark = pytest.mark.django_db


@pytest.fixture
def job(local_site):
    submission = actions.submit_job(
        local_site.alice,
        actions.JobRequest(project=local_site.project, name="sm", script="true", hardware=local_site.hardware, walltime="00:05:00"),
    )
    return submission.job


def test_an_illegal_transition_is_an_error_not_an_overwrite(job):
    with pytest.raises(IllegalTransition):
        with transaction.atomic():
            transition(Job.objects.select_for_update().get(pk=job.pk), JobState.COMPLETED)
    job.refresh_from_db()
    assert job.state == JobState.QUEUED
    assert list(job.events.values_list("to_state", flat=True)) == ["queued"]


def test_final_states_allow_no_further_transition():
    for state in (JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED, JobState.TIMED_OUT):
        assert ALLOWED_TRANSITIONS[state] == frozenset()


def test_every_transition_is_recorded_with_time_and_reason(job, local_site):
    with transaction.atomic():
        transition(Job.objects.select_for_update().get(pk=job.pk), JobState.SUBMITTING, reason="test")
    events = list(JobEvent.objects.filter(job=job))
    assert [(e.from_state, e.to_state) for e in events] == [("", "queued"), ("queued", "submitting")]
    assert events[1].reason == "test"
    assert events[0].at <= events[1].at


def test_cancelling_a_queued_job_ends_it_at_once_and_releases_its_reservation(job, local_site):
    from portal.budgets.actions import summary

    assert summary(local_site.budget).reserved > 0
    actions.request_cancel(job, local_site.alice)
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED
    after = summary(local_site.budget)
    assert after.reserved == 0 and after.spent == 0 and after.available == local_site.budget.amount


def test_an_outsider_cannot_cancel(job, local_site):
    from django.core.exceptions import PermissionDenied

    with pytest.raises(PermissionDenied):
        actions.request_cancel(job, local_site.mallory)
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


def test_moving_many_jobs_at_once_checks_each_move_and_records_each_event(local_site):
    from portal.jobs.transitions import transition_many

    req = actions.JobRequest(project=local_site.project, name="many", script="true", hardware=local_site.hardware,
                             walltime="00:05:00")
    jobs = [job for job in actions.submit_sweep(local_site.alice, req, {"N": [1, 2, 3]}).group.jobs.order_by("pk")]
    with transaction.atomic():
        transition_many(jobs, JobState.SUBMITTING, reason="handing the array to the scheduler")
    assert set(Job.objects.filter(pk__in=[j.pk for j in jobs]).values_list("state", flat=True)) == {"submitting"}
    for job in jobs:
        assert list(job.events.values_list("from_state", "to_state")) == [("", "queued"), ("queued", "submitting")]
    with pytest.raises(IllegalTransition), transaction.atomic():
        transition_many(jobs, JobState.QUEUED, reason="backwards")
    with pytest.raises(ValueError, match="endings"), transaction.atomic():
        transition_many(jobs, JobState.COMPLETED, reason="no settlement this way")
    assert set(Job.objects.filter(pk__in=[j.pk for j in jobs]).values_list("state", flat=True)) == {"submitting"}
