"""Budgets are enforced before and during a run, and the ledger always reconciles."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from decimal import Decimal

import pytest
from django.core import mail
from django.db import connection, connections
from django.utils import timezone

from backends.base import JobRecord, State
from portal.budgets import actions as budgets
from portal.budgets.models import Budget, LedgerEntry
from portal.jobs import tracking
from portal.jobs.actions import submit as submit_actions
from portal.jobs.actions.submit import submit_job
from portal.jobs.actions.validation import BudgetRefused, JobRequest, SubmitError
from portal.jobs.models import Job, JobState
from portal.notifications.models import Notification
from portal.usage.enforcement import enforce, remind_forgotten_jobs


def _request(site, name="job", walltime="01:00:00", nodes=1):
    return JobRequest(project=site.project, name=name, script="echo hi", hardware=site.hardware,
                              walltime=walltime, nodes=nodes)


def _run(job: Job, seconds: int) -> Job:
    """Move a job through the scheduler states as the tracker would, ending with `seconds` of accounting."""
    Job.objects.filter(pk=job.pk).update(state=JobState.RUNNING, scheduler_id="local-x", started_at=timezone.now())
    now = timezone.now()
    tracking.finish_job(job.pk, JobRecord("local-x", State.COMPLETED, 0, now - timedelta(seconds=seconds), now, seconds))
    return Job.objects.get(pk=job.pk)


def _reconciles(budget: Budget) -> None:
    s = budgets.summary(budget)
    assert s.reserved + s.spent + s.available == s.amount


@pytest.mark.django_db
def test_submit_reserves_the_estimate(local_site):
    sub = submit_job(local_site.alice, _request(local_site, walltime="02:00:00"))
    assert sub.estimate.amount == Decimal("20.0000") and sub.estimate.unit == "points"  # 1 node × 10 × 2 h
    summary = budgets.summary(local_site.budget)
    assert (summary.reserved, summary.spent, summary.available) == (Decimal("20"), Decimal("0"), Decimal("80"))
    assert LedgerEntry.objects.get().kind == "reserve"


@pytest.mark.django_db
def test_a_submit_that_does_not_fit_is_refused_saying_how_much_is_left(local_site):
    for i in range(4):
        submit_job(local_site.alice, _request(local_site, name=f"j{i}", walltime="02:00:00"))  # 80 reserved
    with pytest.raises(BudgetRefused) as refused:
        submit_job(local_site.alice, _request(local_site, name="big", walltime="02:30:00"))
    message = str(refused.value)
    assert "needs an estimated 25.00 points" in message
    assert "has only 20.00 points left of 100.00 points (80.00 reserved by running jobs)" in message
    assert Job.objects.count() == 4 and LedgerEntry.objects.count() == 4
    # Exactly what is left still fits, and the refusal took no job number: the researcher's jobs are numbered on.
    last = Job.objects.order_by("-pk").first().pk
    fits = submit_job(local_site.alice, _request(local_site, name="fits", walltime="02:00:00"))
    assert fits.created and fits.job.pk == last + 1


@pytest.mark.django_db
def test_the_end_settles_the_accounting_figure_and_releases_the_rest(local_site):
    job = submit_job(local_site.alice, _request(local_site, walltime="02:00:00")).job
    job = _run(job, seconds=1800)  # half an hour of a 10-point node-hour
    assert job.cost_amount == Decimal("5.0000")
    kinds = list(LedgerEntry.objects.filter(job=job).values_list("kind", "amount"))
    assert kinds == [("reserve", Decimal("20.0000")), ("settle", Decimal("5.0000")), ("release", Decimal("20.0000"))]
    summary = budgets.summary(local_site.budget)
    assert (summary.reserved, summary.spent, summary.available) == (Decimal("0"), Decimal("5"), Decimal("95"))
    _reconciles(local_site.budget)


@pytest.mark.django_db
def test_the_ledger_is_append_only(local_site):
    submit_job(local_site.alice, _request(local_site))
    entry = LedgerEntry.objects.get()
    entry.amount = Decimal("0")
    with pytest.raises(ValueError, match="append-only"):
        entry.save()
    with pytest.raises(ValueError, match="append-only"):
        entry.delete()


@pytest.mark.django_db(transaction=True)
def test_one_hundred_concurrent_submits_against_a_budget_for_ten_accept_exactly_ten(local_site, monkeypatch):
    assert connection.vendor == "postgresql"
    # No dispatch: a live worker running (and settling) an accepted job would free budget for an eleventh while
    # the others are still submitting. This is about the reservations alone.
    monkeypatch.setattr(submit_actions, "enqueue_on_commit", lambda *task: None)
    start = threading.Barrier(40)

    def submit(i: int) -> str:
        try:
            if i < 40:
                start.wait(timeout=30)
            submit_job(local_site.alice, _request(local_site, name=f"c{i}"))  # 10 points each
            return "accepted"
        except BudgetRefused:
            return "refused"
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=40) as pool:
        results = list(pool.map(submit, range(100)))
    assert results.count("accepted") == 10 and results.count("refused") == 90
    assert Job.objects.count() == 10
    reserved = sum(LedgerEntry.objects.filter(kind="reserve").values_list("amount", flat=True))
    assert reserved == Decimal("100")
    _reconciles(local_site.budget)


@pytest.mark.django_db
def test_a_strict_budget_cancels_running_jobs_when_spend_plus_burn_reaches_it(local_site):
    done = submit_job(local_site.alice, _request(local_site, name="done")).job
    _run(done, seconds=3600)  # 10 spent
    job = submit_job(local_site.alice, _request(local_site, name="forgotten", walltime="09:00:00")).job
    Job.objects.filter(pk=job.pk).update(state=JobState.RUNNING, scheduler_id="x",
                                         started_at=timezone.now() - timedelta(hours=8, minutes=30))  # burn 85
    assert enforce(local_site.budget).cancelled == []  # 10 + 85 < 100
    Job.objects.filter(pk=job.pk).update(started_at=timezone.now() - timedelta(hours=9))  # burn 90: 100 reached
    report = enforce(local_site.budget)
    assert report.cancelled == [job.pk]
    job.refresh_from_db()
    assert job.cancel_requested_at is not None
    assert "strict budget" in job.events.last().reason
    with pytest.raises(BudgetRefused):
        submit_job(local_site.alice, _request(local_site, name="more", walltime="00:10:00"))


@pytest.mark.django_db
def test_a_soft_budget_only_warns(local_site):
    Budget.objects.filter(pk=local_site.budget.pk).update(strict=False, amount=Decimal("15"))
    first = submit_job(local_site.alice, _request(local_site, name="a"))
    second = submit_job(local_site.alice, _request(local_site, name="b"))  # 20 reserved of 15
    assert first.created and second.created
    assert any("over its (soft) budget" in w for w in second.warnings)
    Job.objects.filter(pk=second.job.pk).update(state=JobState.RUNNING, started_at=timezone.now() - timedelta(hours=2))
    assert enforce(Budget.objects.get(pk=local_site.budget.pk)).cancelled == []


@pytest.mark.django_db
def test_alerts_go_to_project_admins_at_50_80_and_100_percent_once_each_in_the_bell_and_by_email(
        local_site, eager, django_capture_on_commit_callbacks):
    Budget.objects.filter(pk=local_site.budget.pk).update(alert_thresholds=[50, 80, 100], strict=False)
    budget = Budget.objects.get(pk=local_site.budget.pk)
    job = submit_job(local_site.alice, _request(local_site, walltime="10:00:00")).job
    Job.objects.filter(pk=job.pk).update(state=JobState.RUNNING, started_at=timezone.now() - timedelta(hours=6))
    with django_capture_on_commit_callbacks(execute=True):
        assert enforce(budget).alerts == [50]
    Job.objects.filter(pk=job.pk).update(started_at=timezone.now() - timedelta(hours=8, minutes=30))
    with django_capture_on_commit_callbacks(execute=True):
        assert enforce(budget).alerts == [80]
        assert enforce(budget).alerts == []  # not again
    told = list(Notification.objects.filter(user=local_site.alice).order_by("pk").values_list("kind", "text"))
    assert told == [("budget_alert", "Project vision has used 50% of its budget"),
                    ("budget_alert", "Project vision has used 80% of its budget")]
    assert [m.subject for m in mail.outbox] == ["[Kakehashi] Project vision has used 50% of its budget",
                                                "[Kakehashi] Project vision has used 80% of its budget"]
    assert mail.outbox[0].to == ["alice@example.org"] and "counting running jobs" in mail.outbox[0].body
    assert not Notification.objects.filter(user=local_site.mallory).exists()  # not a member of vision


@pytest.mark.django_db
def test_a_forgotten_job_reminds_its_owner_once_and_its_history_says_so(
        local_site, eager, django_capture_on_commit_callbacks):
    local_site.project.remind_after_hours = 24
    local_site.project.save()
    job = submit_job(local_site.alice, _request(local_site)).job
    Job.objects.filter(pk=job.pk).update(state=JobState.RUNNING, started_at=timezone.now() - timedelta(days=10))
    with django_capture_on_commit_callbacks(execute=True):
        assert remind_forgotten_jobs() == [job.pk]
        assert remind_forgotten_jobs() == []
    assert len(mail.outbox) == 1 and "has been running for 240 hours" in mail.outbox[0].subject
    (notice,) = Notification.objects.filter(user=local_site.alice)
    assert notice.kind == "reminder" and notice.job_id == job.pk
    (event,) = job.events.filter(cause="reminder")
    assert event.reason == "its owner was reminded: running for 240.0 hours (the project reminds after 24)"


@pytest.mark.django_db
def test_a_project_maximum_walltime_is_enforced_at_submit(local_site):
    local_site.project.max_walltime_hours = 1
    local_site.project.save()
    with pytest.raises(SubmitError, match="project vision allows at most 1 h"):
        submit_job(local_site.alice, _request(local_site, walltime="01:30:00"))


@pytest.mark.django_db
def test_costs_convert_between_units_an_admin_set(local_site):
    from portal.budgets.models import UnitConversion

    Budget.objects.filter(pk=local_site.budget.pk).update(unit="JPY", amount=Decimal("100000"))
    local_site.hardware.rate_unit = "USD"
    local_site.hardware.save()
    with pytest.raises(SubmitError, match="no conversion from USD to JPY"):
        submit_job(local_site.alice, _request(local_site))
    UnitConversion.objects.create(from_unit="USD", to_unit="JPY", factor=Decimal("150"))
    sub = submit_job(local_site.alice, _request(local_site))
    assert (sub.estimate.amount, sub.estimate.unit) == (Decimal("1500.0000"), "JPY")


@pytest.mark.django_db
def test_a_conversion_set_one_way_converts_both_ways_and_is_found_in_one_statement_the_direct_one_first():
    from django.test.utils import CaptureQueriesContext

    from portal.budgets.models import UnitConversion

    UnitConversion.objects.create(from_unit="USD", to_unit="JPY", factor=Decimal("150"))
    with CaptureQueriesContext(connection) as both:
        assert budgets.convert(Decimal("3"), "USD", "JPY") == Decimal("450")
        assert budgets.convert(Decimal("450"), "JPY", "USD") == Decimal("3")
    assert len(both.captured_queries) == 2
    UnitConversion.objects.create(from_unit="JPY", to_unit="USD", factor=Decimal("0.01"))  # set both: each its own
    assert budgets.convert(Decimal("450"), "JPY", "USD") == Decimal("4.5")
    with pytest.raises(budgets.NoConversion, match="no conversion from EUR to JPY"):
        budgets.convert(Decimal("1"), "EUR", "JPY")
