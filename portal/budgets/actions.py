"""Money: estimates, reservations at submit, settlement at the end, and the sums that must reconcile.

Every movement is a LedgerEntry written while the project's Budget row is locked (portal/budgets/locks.py), so
concurrent submits are serialised on that row and can never overspend together.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from django.db import transaction
from django.db.models import Q, Sum
from django.utils import timezone

from portal.budgets import locks
from portal.budgets.display import amount_text
from portal.budgets.models import Budget, LedgerEntry, Period, UnitConversion

CENT = Decimal("0.0001")


class BudgetExceeded(Exception):
    """A strict budget cannot cover a job's estimate. The message says how much is left."""

    def __init__(self, message: str, *, available: Decimal, needed: Decimal, unit: str) -> None:
        super().__init__(message)
        self.available, self.needed, self.unit = available, needed, unit


class NoConversion(Exception):
    pass


@dataclass(frozen=True)
class Money:
    amount: Decimal
    unit: str

    def __str__(self) -> str:
        return f"{amount_text(self.amount)} {self.unit}"


@dataclass(frozen=True)
class BudgetSummary:
    amount: Decimal
    unit: str
    reserved: Decimal
    spent: Decimal
    available: Decimal
    period_start: date
    strict: bool

    @property
    def used_percent(self) -> float:
        if self.amount <= 0:
            return 100.0
        return float((self.spent + self.reserved) / self.amount * 100)

    @property
    def spent_percent(self) -> float:
        return 0.0 if self.amount <= 0 else float(self.spent / self.amount * 100)

    @property
    def reserved_percent(self) -> float:
        return 0.0 if self.amount <= 0 else float(self.reserved / self.amount * 100)


def period_start(budget: Budget, at: datetime | None = None) -> date:
    today = timezone.localdate(at) if at else timezone.localdate()
    if budget.period == Period.MONTHLY:
        return today.replace(day=1)
    if budget.period == Period.FISCAL_YEAR:  # Japanese fiscal year: April to March
        year = today.year if today.month >= 4 else today.year - 1
        return date(year, 4, 1)
    return date(2000, 1, 1)


def convert(amount: Decimal, from_unit: str, to_unit: str) -> Decimal:
    return conversion(from_unit, to_unit)(amount)


def conversion(from_unit: str, to_unit: str) -> Callable[[Decimal], Decimal]:
    """`convert` from one unit to another, looked up once (a report converts many amounts with it)."""
    if from_unit == to_unit:
        return lambda amount: amount
    direct = UnitConversion.objects.filter(from_unit=from_unit, to_unit=to_unit).first()
    if direct:
        return lambda amount: amount * direct.factor
    inverse = UnitConversion.objects.filter(from_unit=to_unit, to_unit=from_unit).first()
    if inverse and inverse.factor:
        return lambda amount: amount / inverse.factor
    raise NoConversion(f"no conversion from {from_unit} to {to_unit} is set; ask a site admin to add one")


def cost(rate: Decimal, rate_unit: str, nodes: int, seconds: int, to_unit: str,
         conversions: dict[tuple[str, str], Callable[[Decimal], Decimal]] | None = None) -> Money:
    """nodes × rate per node-hour × hours, in `to_unit`. `conversions`: a cache of the unit conversions looked up,
    for a caller costing many jobs at once (a tracking cycle's endings)."""
    raw = Decimal(rate) * nodes * Decimal(seconds) / Decimal(3600)
    if conversions is None:
        converted = convert(raw, rate_unit, to_unit)
    else:
        if (rate_unit, to_unit) not in conversions:
            conversions[(rate_unit, to_unit)] = conversion(rate_unit, to_unit)
        converted = conversions[(rate_unit, to_unit)](raw)
    return Money(converted.quantize(CENT, rounding=ROUND_HALF_UP), to_unit)


def summary(budget: Budget, at: datetime | None = None) -> BudgetSummary:
    start = period_start(budget, at)
    sums = LedgerEntry.objects.filter(budget=budget, period_start=start).aggregate(
        reserve=Sum("amount", filter=Q(kind=LedgerEntry.Kind.RESERVE)),
        release=Sum("amount", filter=Q(kind=LedgerEntry.Kind.RELEASE)),
        settle=Sum("amount", filter=Q(kind=LedgerEntry.Kind.SETTLE)),
        adjust=Sum("amount", filter=Q(kind=LedgerEntry.Kind.ADJUST)),
    )
    zero = Decimal("0")
    reserved = (sums["reserve"] or zero) - (sums["release"] or zero)
    spent = (sums["settle"] or zero) + (sums["adjust"] or zero)
    return BudgetSummary(
        amount=budget.amount,
        unit=budget.unit,
        reserved=reserved,
        spent=spent,
        available=budget.amount - reserved - spent,
        period_start=start,
        strict=budget.strict,
    )


def reserve(job, amount: Decimal, *, actor=None) -> LedgerEntry | None:
    """Reserve a job's estimate, refusing it if a strict budget cannot cover it. Call inside a transaction."""
    entries = reserve_many(job.project, [(job, amount)], actor=actor)
    return entries[0] if entries else None


def reserve_many(project, estimates: list[tuple[Any, Decimal]], *, actor=None) -> list[LedgerEntry]:
    """Reserve the estimates of several jobs of one project together: all fit a strict budget, or none is
    reserved (BudgetExceeded). One lock on the budget row, one sum of the ledger. Call inside a transaction."""
    budget = locks.budget_of_project(project.pk)
    if budget is None or not estimates:
        return []
    current = summary(budget)
    needed = sum((amount for _, amount in estimates), Decimal("0"))
    if budget.strict and needed > current.available:
        what = "This job needs" if len(estimates) == 1 else f"These {len(estimates)} jobs need"
        raise BudgetExceeded(
            f"{what} an estimated {amount_text(needed)} {budget.unit} but project "
            f"{project.slug} has only {amount_text(max(current.available, Decimal(0)))} "
            f"{budget.unit} left of {amount_text(budget.amount)} {budget.unit} "
            f"({amount_text(current.reserved)} reserved by running jobs). Ask a project admin to "
            "raise the budget, or ask for fewer nodes or a shorter walltime.",
            available=current.available,
            needed=needed,
            unit=budget.unit,
        )
    return LedgerEntry.objects.bulk_create(
        LedgerEntry(budget=budget, job=job, kind=LedgerEntry.Kind.RESERVE, amount=amount,
                    period_start=current.period_start, actor=actor, note=f"estimate for job {job.pk}")
        for job, amount in estimates
    )


def settle(job, actual: Decimal | None, *, note: str = "") -> None:
    """Charge the actual cost and release the reservation. Idempotent; call inside the job's transaction."""
    settle_many([(job, actual)], note=note)


def settle_many(endings: list[tuple[Any, Decimal | None]], *, note: str = "") -> None:
    """`settle` for many ended jobs at once (a tracking cycle): their budget rows locked in pk order, one read of
    what is settled already, one INSERT. Idempotent; call inside the jobs' transaction (their rows locked)."""
    if not endings:
        return
    jobs = {job.pk: (job, actual) for job, actual in endings}
    reservations = {entry.job_id: entry for entry in
                    LedgerEntry.objects.filter(job_id__in=list(jobs), kind=LedgerEntry.Kind.RESERVE)}
    if not reservations:
        return
    locks.budgets(sorted({entry.budget_id for entry in reservations.values()}))
    done = set(LedgerEntry.objects.filter(job_id__in=list(reservations)).values_list("job_id", "kind"))
    entries = []
    for job_id, reservation in reservations.items():
        job, actual = jobs[job_id]
        if actual is not None and (job_id, LedgerEntry.Kind.SETTLE) not in done:
            entries.append(LedgerEntry(
                budget_id=reservation.budget_id, job=job, kind=LedgerEntry.Kind.SETTLE, amount=actual,
                period_start=reservation.period_start, note=note or f"accounting for job {job.pk}"))
        if (job_id, LedgerEntry.Kind.RELEASE) not in done:
            entries.append(LedgerEntry(
                budget_id=reservation.budget_id, job=job, kind=LedgerEntry.Kind.RELEASE, amount=reservation.amount,
                period_start=reservation.period_start, note=f"release of job {job.pk}'s reservation"))
    LedgerEntry.objects.bulk_create(entries)


@transaction.atomic
def set_budget(project, *, amount: Decimal, unit: str, period: str, strict: bool, actor) -> Budget:
    from portal.audit.actions import record

    budget, created = locks.budget_or_new(
        project, defaults={"amount": amount, "unit": unit, "period": period, "strict": strict}
    )
    before = {"amount": str(budget.amount), "unit": budget.unit, "period": budget.period, "strict": budget.strict}
    if not created:
        if unit != budget.unit and budget.entries.exists():
            raise ValueError(f"the budget already has movements in {budget.unit}; its unit cannot change")
        budget.amount, budget.unit, budget.period, budget.strict = amount, unit, period, strict
        budget.save()
    record(
        "budget.set",
        actor=actor,
        project=project,
        target=budget,
        before=None if created else before,
        after={"amount": str(amount), "unit": unit, "period": period, "strict": strict},
    )
    return budget
