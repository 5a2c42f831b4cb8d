"""Money: estimates, reservations at submit, settlement at the end, and the sums that must reconcile.

Every movement is a LedgerEntry written while the project's Budget row is locked (portal/budgets/locks.py), so
concurrent submits are serialised on that row and can never overspend together.

Why one module: every function here writes or sums the ledger of Budget rows it locked, and reserving,
settling and appending share the private sums and period starts; split, the rule "written while the budget row
is locked" would have to be kept in several places.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import date, datetime
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from django.db import connection, transaction
from django.db.models import F, Q, Sum
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
    return _period_starts(at)[budget.period if budget.period in _PERIODS else Period.ONCE]


_PERIODS = (Period.ONCE, Period.MONTHLY, Period.FISCAL_YEAR)


def _period_starts(at: datetime | None = None) -> dict[str, date]:
    """Where the period of each kind that contains `at` (now) began."""
    today = timezone.localdate(at) if at else timezone.localdate()
    year = today.year if today.month >= 4 else today.year - 1  # Japanese fiscal year: April to March
    return {Period.ONCE: date(2000, 1, 1), Period.MONTHLY: today.replace(day=1), Period.FISCAL_YEAR: date(year, 4, 1)}


def convert(amount: Decimal, from_unit: str, to_unit: str) -> Decimal:
    return conversion(from_unit, to_unit)(amount)


def conversion(from_unit: str, to_unit: str) -> Callable[[Decimal], Decimal]:
    """`convert` from one unit to another, looked up once (a report converts many amounts with it)."""
    if from_unit == to_unit:
        return lambda amount: amount
    # Both directions in one statement; the direct one wins where a site admin set both.
    found = {(row.from_unit, row.to_unit): row for row in UnitConversion.objects.filter(
        Q(from_unit=from_unit, to_unit=to_unit) | Q(from_unit=to_unit, to_unit=from_unit))}
    direct = found.get((from_unit, to_unit))
    if direct:
        return lambda amount: amount * direct.factor
    inverse = found.get((to_unit, from_unit))
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
            try:
                conversions[(rate_unit, to_unit)] = conversion(rate_unit, to_unit)
            except NoConversion as exc:
                conversions[(rate_unit, to_unit)] = exc  # a missing one is remembered too: asked once
        found = conversions[(rate_unit, to_unit)]
        if isinstance(found, NoConversion):
            raise NoConversion(str(found))
        converted = found(raw)
    return Money(converted.quantize(CENT, rounding=ROUND_HALF_UP), to_unit)


def summary(budget: Budget, at: datetime | None = None) -> BudgetSummary:
    """The figures of the period containing `at` (now), summed from the ledger (the record; pages and reports)."""
    return _sums(budget, period_start(budget, at))


def _sums(budget: Budget, start: date) -> BudgetSummary:
    sums = LedgerEntry.objects.filter(budget=budget, period_start=start).aggregate(**_SUMS)
    return _summary_of(budget, start, sums)


def summaries(budgets: list[Budget]) -> dict[int, BudgetSummary]:
    """`summary` of several budgets (a page of project cards) in one aggregate, keyed by budget id."""
    if not budgets:
        return {}
    starts = {budget.pk: period_start(budget) for budget in budgets}
    current = Q()
    for pk, start in starts.items():
        current |= Q(budget_id=pk, period_start=start)
    rows = {row["budget_id"]: row for row in LedgerEntry.objects.filter(current).order_by()
            .values("budget_id").annotate(**_SUMS)}
    return {budget.pk: _summary_of(budget, starts[budget.pk], rows.get(budget.pk, {})) for budget in budgets}


_SUMS = {
    "reserve": Sum("amount", filter=Q(kind=LedgerEntry.Kind.RESERVE)),
    "release": Sum("amount", filter=Q(kind=LedgerEntry.Kind.RELEASE)),
    "settle": Sum("amount", filter=Q(kind=LedgerEntry.Kind.SETTLE)),
    "adjust": Sum("amount", filter=Q(kind=LedgerEntry.Kind.ADJUST)),
}


def _summary_of(budget: Budget, start: date, sums: dict) -> BudgetSummary:
    zero = Decimal("0")
    reserved = (sums.get("reserve") or zero) - (sums.get("release") or zero)
    spent = (sums.get("settle") or zero) + (sums.get("adjust") or zero)
    return BudgetSummary(
        amount=budget.amount,
        unit=budget.unit,
        reserved=reserved,
        spent=spent,
        available=budget.amount - reserved - spent,
        period_start=start,
        strict=budget.strict,
    )


def reserve(job, amount: Decimal, *, actor=None) -> BudgetSummary | None:
    """Reserve a job's estimate, refusing it if a strict budget cannot cover it. Call inside a transaction."""
    return reserve_many(job.project, [(job, amount)], actor=actor)


def reserve_many(project, estimates: list[tuple[Any, Decimal]], *, actor=None) -> BudgetSummary | None:
    """Reserve the estimates of several jobs of one project together: all fit a strict budget, or none is
    reserved (BudgetExceeded). The budget's balance after it (None: the project has no budget). Call inside a
    transaction, after the jobs' rows (the lock order).

    On PostgreSQL one statement locks the budget row, checks and reserves: a conditional UPDATE of the balance the
    row keeps (its WHERE is evaluated again on the newest version of the row once a concurrent reservation has
    committed, so two submits never both take the last of the money), and the ledger's entries appended from what
    it returns. A sum of the ledger read by the locking statement would be of the snapshot taken before the wait
    for the lock (docs/decisions/0021); the balance is a column of the locked row itself (0024).
    """
    if not estimates:
        return None
    needed = sum((amount for _, amount in estimates), Decimal("0"))
    if connection.vendor != "postgresql":  # `make run`'s SQLite serialises writers: the portable way
        return _reserve_portably(project, estimates, needed, actor)
    after = _reserve_if_it_fits(project.pk, estimates, needed, actor)
    if after is not None:
        return after
    # Nothing was reserved: the project has no budget, or a strict one cannot cover it. Hold the row and try once
    # more (what was released meanwhile counts), so the refusal says what is left as it is now.
    budget = locks.budget_of_project(project.pk)
    if budget is None:
        return None
    after = _reserve_if_it_fits(project.pk, estimates, needed, actor)
    if after is not None:
        return after
    raise _exceeded(project, len(estimates), needed, _balance(budget))


def _reserve_if_it_fits(project_id: int, estimates: list[tuple[Any, Decimal]], needed: Decimal,
                        actor) -> BudgetSummary | None:
    starts = _period_starts()
    budget_table, ledger_table = (connection.ops.quote_name(m._meta.db_table) for m in (Budget, LedgerEntry))
    period = "(CASE b.period WHEN 'monthly' THEN d.monthly WHEN 'fiscal_year' THEN d.fiscal ELSE d.once END)"
    sql = f"""
        WITH reserved AS (
            UPDATE {budget_table} AS b
            SET balance_period = {period},
                reserved = (CASE WHEN b.balance_period = {period} THEN b.reserved ELSE 0 END) + %(needed)s,
                spent = CASE WHEN b.balance_period = {period} THEN b.spent ELSE 0 END
            FROM (VALUES (%(once)s::date, %(monthly)s::date, %(fiscal)s::date)) AS d(once, monthly, fiscal)
            WHERE b.project_id = %(project)s
              AND (NOT b.strict
                   OR b.amount - (CASE WHEN b.balance_period = {period} THEN b.reserved + b.spent ELSE 0 END)
                      >= %(needed)s)
            RETURNING b.id, b.amount, b.unit, b.strict, b.reserved, b.spent, b.balance_period
        ), entries AS (
            INSERT INTO {ledger_table} (budget_id, job_id, kind, amount, period_start, created_at, actor_id, note)
            SELECT r.id, e.job_id, %(kind)s, e.amount, r.balance_period, %(now)s, %(actor)s, e.note
            FROM reserved AS r, unnest(%(jobs)s::bigint[], %(amounts)s::numeric[], %(notes)s::text[])
                 AS e(job_id, amount, note)
        )
        SELECT amount, unit, strict, reserved, spent, balance_period FROM reserved"""  # noqa: S608
    params = {
        "needed": needed, "once": starts[Period.ONCE], "monthly": starts[Period.MONTHLY],
        "fiscal": starts[Period.FISCAL_YEAR], "project": project_id, "kind": LedgerEntry.Kind.RESERVE.value,
        "now": timezone.now(), "actor": getattr(actor, "pk", None), "jobs": [job.pk for job, _ in estimates],
        "amounts": [amount for _, amount in estimates], "notes": [f"estimate for job {job.pk}" for job, _ in estimates],
    }
    with connection.cursor() as cursor:
        # Identifiers come from the models' meta; every value is a bound parameter.
        cursor.execute(sql, params)
        row = cursor.fetchone()
    if row is None:
        return None
    amount, unit, strict, reserved, spent, start = row
    return BudgetSummary(amount=amount, unit=unit, reserved=reserved, spent=spent, available=amount - reserved - spent,
                         period_start=start, strict=strict)


def _reserve_portably(project, estimates: list[tuple[Any, Decimal]], needed: Decimal, actor) -> BudgetSummary | None:
    """reserve_many without PostgreSQL's UPDATE … RETURNING in a CTE: lock, check, append (SQLite, `make run`)."""
    budget = locks.budget_of_project(project.pk)
    if budget is None:
        return None
    current = _balance(budget)
    if budget.strict and needed > current.available:
        raise _exceeded(project, len(estimates), needed, current)
    if budget.balance_period != current.period_start:  # a new period (or the first reservation): it starts at zero
        Budget.objects.filter(pk=budget.pk).update(balance_period=current.period_start, reserved=0, spent=0)
    append([LedgerEntry(budget=budget, job=job, kind=LedgerEntry.Kind.RESERVE, amount=amount,
                        period_start=current.period_start, actor=actor, note=f"estimate for job {job.pk}")
            for job, amount in estimates], balance_of={budget.pk: current.period_start})
    reserved = current.reserved + needed
    return replace(current, reserved=reserved, available=current.amount - reserved - current.spent)


def _balance(budget: Budget) -> BudgetSummary:
    """The current period's figures from the balance a (locked) budget row keeps."""
    start = period_start(budget)
    kept = budget.balance_period == start
    reserved = budget.reserved if kept else Decimal("0")
    spent = budget.spent if kept else Decimal("0")
    return BudgetSummary(amount=budget.amount, unit=budget.unit, reserved=reserved, spent=spent,
                         available=budget.amount - reserved - spent, period_start=start, strict=budget.strict)


# The columns of a project's budget that say what it has left (read beside a submit's grant: validation.py).
BUDGET_FIGURES = ("amount", "unit", "period", "strict", "balance_period", "reserved", "spent")


def balance_of_figures(figures: dict[str, Any]) -> BudgetSummary | None:
    """The current period's balance from a budget's BUDGET_FIGURES as read (None: the project has no budget)."""
    if figures.get("amount") is None:
        return None
    return _balance(Budget(**figures))


def refuse_unless_it_fits(project, count: int, needed: Decimal, before: BudgetSummary | None) -> None:
    """BudgetExceeded, before anything is recorded, for jobs a strict budget cannot cover as it was just read: a
    refused submit records nothing (and so takes no job number). The reservation under the budget's row lock
    (`reserve_many`) still decides; this only spares the rows a refusal would roll back."""
    if before is not None and before.strict and needed > before.available:
        raise _exceeded(project, count, needed, before)


def _exceeded(project, count: int, needed: Decimal, current: BudgetSummary) -> BudgetExceeded:
    what = "This job needs" if count == 1 else f"These {count} jobs need"
    return BudgetExceeded(
        f"{what} an estimated {amount_text(needed)} {current.unit} but project "
        f"{project.slug} has only {amount_text(max(current.available, Decimal(0)))} "
        f"{current.unit} left of {amount_text(current.amount)} {current.unit} "
        f"({amount_text(current.reserved)} reserved by running jobs). Ask a project admin to "
        "raise the budget, or ask for fewer nodes or a shorter walltime.",
        available=current.available,
        needed=needed,
        unit=current.unit,
    )


def settle(job, actual: Decimal | None, *, note: str = "") -> None:
    """Charge the actual cost and release the reservation. Idempotent; call inside the job's transaction."""
    settle_many([(job, actual)], note=note)


def settle_many(endings: list[tuple[Any, Decimal | None]], *, note: str = "") -> None:
    """`settle` for many ended jobs at once (a tracking cycle): their budget rows locked in pk order, one read of
    what is settled already, one statement appending the entries and moving the balances. Idempotent; call inside
    the jobs' transaction (their rows locked)."""
    if not endings:
        return
    jobs = {job.pk: (job, actual) for job, actual in endings}
    reservations = {entry.job_id: entry for entry in
                    LedgerEntry.objects.filter(job_id__in=list(jobs), kind=LedgerEntry.Kind.RESERVE)}
    if not reservations:
        return
    locked = locks.budgets(sorted({entry.budget_id for entry in reservations.values()}))
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
    append(entries, balance_of={budget.pk: budget.balance_period for budget in locked})


# How each kind of entry moves the balance: (reserved, spent).
_MOVES = {LedgerEntry.Kind.RESERVE: (1, 0), LedgerEntry.Kind.RELEASE: (-1, 0), LedgerEntry.Kind.SETTLE: (0, 1),
          LedgerEntry.Kind.ADJUST: (0, 1)}


def append(entries: list[LedgerEntry], *, balance_of: dict[int, date | None]) -> None:
    """Append ledger entries and move their budgets' balances with them: the one way entries are written after a
    reservation (settlements, releases, adjustments). Entries of a period other than the one a budget's balance
    keeps (a job reserved last month, settled this month) count in their own period only, as summary() sums them.
    The budget rows must be locked (`balance_of`: their balance_period as locked, for the portable path)."""
    if not entries:
        return
    if connection.vendor != "postgresql":
        LedgerEntry.objects.bulk_create(entries)
        moves: dict[tuple[int, date], list[Decimal]] = {}
        for entry in entries:
            reserved, spent = _MOVES[entry.kind]
            move = moves.setdefault((entry.budget_id, entry.period_start), [Decimal("0"), Decimal("0")])
            move[0] += reserved * entry.amount
            move[1] += spent * entry.amount
        for (budget_id, start), (reserved, spent) in moves.items():
            if balance_of.get(budget_id) == start:
                Budget.objects.filter(pk=budget_id, balance_period=start).update(
                    reserved=F("reserved") + reserved, spent=F("spent") + spent)
        return
    now = timezone.now()
    budget_table, ledger_table = (connection.ops.quote_name(m._meta.db_table) for m in (Budget, LedgerEntry))
    sql = f"""
        WITH entries AS (
            INSERT INTO {ledger_table} (budget_id, job_id, kind, amount, period_start, created_at, actor_id, note)
            SELECT * FROM unnest(%(budgets)s::bigint[], %(jobs)s::bigint[], %(kinds)s::varchar[], %(amounts)s::numeric[],
                                 %(starts)s::date[], %(at)s::timestamptz[], %(actors)s::bigint[], %(notes)s::varchar[])
            RETURNING budget_id, kind, amount, period_start
        ), moves AS (
            SELECT budget_id, period_start,
                   SUM(CASE kind WHEN 'reserve' THEN amount WHEN 'release' THEN -amount ELSE 0 END) AS reserved,
                   SUM(CASE WHEN kind IN ('settle', 'adjust') THEN amount ELSE 0 END) AS spent
            FROM entries GROUP BY budget_id, period_start
        )
        UPDATE {budget_table} AS b SET reserved = b.reserved + m.reserved, spent = b.spent + m.spent
        FROM moves AS m WHERE b.id = m.budget_id AND b.balance_period = m.period_start"""  # noqa: S608
    params = {
        "budgets": [e.budget_id for e in entries], "jobs": [e.job_id for e in entries],
        "kinds": [str(e.kind) for e in entries],
        "amounts": [e.amount for e in entries], "starts": [e.period_start for e in entries],
        "at": [now] * len(entries), "actors": [e.actor_id for e in entries], "notes": [e.note for e in entries],
    }
    with connection.cursor() as cursor:
        # Identifiers come from the models' meta; every value is a bound parameter.
        cursor.execute(sql, params)


def rebalance(budget: Budget) -> None:
    """Set a locked budget's balance to its ledger's sums for the current period (a period or budget changed)."""
    current = summary(budget)
    budget.balance_period, budget.reserved, budget.spent = current.period_start, current.reserved, current.spent
    Budget.objects.filter(pk=budget.pk).update(balance_period=current.period_start, reserved=current.reserved,
                                               spent=current.spent)


def balance_drift() -> list[tuple[Budget, BudgetSummary]]:
    """Budgets whose kept balance differs from the sums of their ledger for the period it keeps, with those sums
    (the check of `manage.py check_budget_balances`; tests run it after moving money)."""
    drifted = []
    for budget in Budget.objects.exclude(balance_period=None).order_by("pk"):
        ledger = _sums(budget, budget.balance_period)
        if (ledger.reserved, ledger.spent) != (budget.reserved, budget.spent):
            drifted.append((budget, ledger))
    return drifted


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
        if budget.period != before["period"]:
            rebalance(budget)  # the balance is of one period: the new kind of period begins elsewhere
    record(
        "budget.set",
        actor=actor,
        project=project,
        target=budget,
        before=None if created else before,
        after={"amount": str(amount), "unit": unit, "period": period, "strict": strict},
    )
    return budget
