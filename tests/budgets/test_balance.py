"""The balance a budget row keeps (what a reservation checks in one statement) always equals its ledger's sums."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import date, timedelta
from decimal import Decimal

import pytest
from django.core.management import call_command
from django.db import connections
from django.utils import timezone

from backends.base import JobRecord, State
from portal.budgets import actions as budgets
from portal.budgets.models import Budget, LedgerEntry, Period
from portal.jobs import tracking
from portal.jobs.actions import submit as submit_actions
from portal.jobs.actions.cancel import request_cancel
from portal.jobs.actions.submit import submit_job
from portal.jobs.actions.validation import BudgetRefused, JobRequest
from portal.jobs.models import Job, JobState


def _request(site, name="job", walltime="01:00:00"):
    return JobRequest(project=site.project, name=name, script="echo hi", hardware=site.hardware,
                              walltime=walltime)


def _balance_matches_the_ledger(site) -> Budget:
    budget = Budget.objects.get(pk=site.budget.pk)
    ledger = budgets.summary(budget)
    assert (budget.balance_period, budget.reserved, budget.spent) == (ledger.period_start, ledger.reserved, ledger.spent)
    assert budgets.balance_drift() == []
    return budget


@pytest.mark.django_db
def test_reservations_settlements_and_cancels_keep_the_balance_equal_to_the_ledger(local_site):
    kept = submit_job(local_site.alice, _request(local_site, "kept", "02:00:00")).job
    cancelled = submit_job(local_site.alice, _request(local_site, "cancelled")).job
    assert _balance_matches_the_ledger(local_site).reserved == Decimal("30")
    request_cancel(cancelled, local_site.alice)  # still queued: ends at once, its reservation released
    assert _balance_matches_the_ledger(local_site).reserved == Decimal("20")
    Job.objects.filter(pk=kept.pk).update(state=JobState.RUNNING, scheduler_id="local-x", started_at=timezone.now())
    now = timezone.now()
    tracking.finish_job(kept.pk, JobRecord("local-x", State.COMPLETED, 0, now - timedelta(seconds=1800), now, 1800))
    budget = _balance_matches_the_ledger(local_site)
    assert (budget.reserved, budget.spent) == (Decimal("0"), Decimal("5"))
    with pytest.raises(BudgetRefused, match="has only 95.00 points left"):
        submit_job(local_site.alice, _request(local_site, "too-big", "10:00:00"))
    _balance_matches_the_ledger(local_site)
    call_command("check_budget_balances")


@pytest.mark.django_db
def test_a_new_period_starts_the_balance_at_zero_and_old_settlements_stay_in_their_period(local_site):
    Budget.objects.filter(pk=local_site.budget.pk).update(period=Period.MONTHLY)
    last_month = (timezone.localdate().replace(day=1) - timedelta(days=1)).replace(day=1)
    old = submit_job(local_site.alice, _request(local_site, "old", "09:00:00")).job
    # As if it had been reserved last month, when the balance kept last month's sums.
    LedgerEntry.objects.filter(job=old).update(period_start=last_month)
    Budget.objects.filter(pk=local_site.budget.pk).update(balance_period=last_month)
    fresh = submit_job(local_site.alice, _request(local_site, "fresh", "09:00:00"))  # 90 more fits: new month
    assert fresh.created
    budget = _balance_matches_the_ledger(local_site)
    assert (budget.balance_period, budget.reserved) == (timezone.localdate().replace(day=1), Decimal("90"))
    request_cancel(old, local_site.alice)  # released in last month's figures, not this month's
    assert _balance_matches_the_ledger(local_site).reserved == Decimal("90")


@pytest.mark.django_db
def test_changing_the_period_sets_the_balance_from_the_ledger(local_site):
    submit_job(local_site.alice, _request(local_site))
    budgets.set_budget(local_site.project, amount=Decimal("100"), unit="points", period=Period.MONTHLY, strict=True,
                       actor=local_site.alice)
    assert _balance_matches_the_ledger(local_site).reserved == Decimal("0")  # the reservation counts in "once"
    budgets.set_budget(local_site.project, amount=Decimal("100"), unit="points", period=Period.ONCE, strict=True,
                       actor=local_site.alice)
    budget = _balance_matches_the_ledger(local_site)
    assert (budget.balance_period, budget.reserved) == (date(2000, 1, 1), Decimal("10"))


@pytest.mark.django_db
def test_the_check_names_a_budget_whose_balance_was_changed_around_the_ledger_and_fix_sets_it(local_site):
    submit_job(local_site.alice, _request(local_site))
    Budget.objects.filter(pk=local_site.budget.pk).update(reserved=Decimal("3"))
    with pytest.raises(Exception, match="1 budget"):
        call_command("check_budget_balances")
    call_command("check_budget_balances", fix=True)
    assert _balance_matches_the_ledger(local_site).reserved == Decimal("10")


@pytest.mark.django_db(transaction=True)
def test_concurrent_submits_and_settlements_leave_the_balance_equal_to_the_ledger(local_site, monkeypatch):
    monkeypatch.setattr(submit_actions, "enqueue_on_commit", lambda *task: None)
    Budget.objects.filter(pk=local_site.budget.pk).update(amount=Decimal("200"))
    first = [submit_job(local_site.alice, _request(local_site, f"f{i}")).job for i in range(5)]
    start = threading.Barrier(10)

    def work(i: int) -> None:
        try:
            start.wait(timeout=30)
            if i < 5:
                job = first[i]
                Job.objects.filter(pk=job.pk).update(state=JobState.RUNNING, scheduler_id=f"x{i}")
                now = timezone.now()
                tracking.finish_job(job.pk, JobRecord(f"x{i}", State.COMPLETED, 0, now, now, 360))
            else:
                try:
                    submit_job(local_site.alice, _request(local_site, f"c{i}"))
                except BudgetRefused:
                    pass
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=10) as pool:
        list(pool.map(work, range(10)))
    _balance_matches_the_ledger(local_site)
