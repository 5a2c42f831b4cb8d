"""Usage: what was spent, by cluster, hardware, user and month, from the jobs' settled costs."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC
from decimal import Decimal

from django.db.models import Count, F, QuerySet, Sum, Value
from django.db.models.functions import Coalesce, ExtractMonth, ExtractYear, NullIf

from portal.budgets.actions import NoConversion, conversion
from portal.jobs.models import Job


@dataclass
class UsageRow:
    month: str
    project: str
    cluster: str
    hardware: str
    user: str
    jobs: int
    node_hours: Decimal
    cost: Decimal
    unit: str


def usage_rows(jobs: QuerySet[Job], unit: str | None = None) -> list[UsageRow]:
    """Settled jobs grouped by month × project × cluster × hardware × user; costs converted to `unit` if given.

    PostgreSQL groups and sums (one query, a row per group whatever the number of jobs: a project with 10,000 ended
    jobs is a few hundred rows here, not 10,000 models); conversions are applied per group, each looked up once."""
    # Year and month as integers, in UTC as the jobs' stamps say: no datetime to build and convert per group.
    ended = Coalesce("ended_at", "created_at")
    grouped = (
        jobs.filter(cost_amount__isnull=False).order_by()
        .values_list(ExtractYear(ended, tzinfo=UTC), ExtractMonth(ended, tzinfo=UTC), "project__slug", "cluster__slug",
                     Coalesce("hardware__slug", Value("-")), "user__username",
                     Coalesce(NullIf("estimate_unit", Value("")), "hardware__rate_unit", Value("")))
        .annotate(n=Count("id"), node_seconds=Sum(Coalesce("elapsed_seconds", 0) * F("nodes")), cost=Sum("cost_amount"))
    )
    groups: dict[tuple, list] = defaultdict(lambda: [0, 0, Decimal("0")])
    conversions: dict[str, object] = {}  # from unit → its conversion to `unit` (or NoConversion): one lookup each
    for year, month, project, cluster, hardware, user, row_unit, n, node_seconds, cost in grouped:
        cost = cost or Decimal("0")
        if unit and row_unit != unit:
            if row_unit not in conversions:
                try:
                    conversions[row_unit] = conversion(row_unit, unit)
                except NoConversion as exc:
                    conversions[row_unit] = exc
            if callable(conversions[row_unit]):
                cost, row_unit = conversions[row_unit](cost), unit
            # else: shown in its own unit rather than silently wrong
        row = groups[(f"{year:04d}-{month:02d}", project, cluster, hardware, user, row_unit)]
        row[0] += n  # two source units converted to the same one share a row
        row[1] += node_seconds or 0
        row[2] += cost
    # Sorted as the tuples would be, on one string each (NUL sorts before any character of a slug or a name):
    # thousands of rows sort several times faster.
    ordered = sorted(groups.items(), key=lambda item: "\0".join(item[0]))
    hour = Decimal(3600)
    cent = Decimal("0.01")
    return [
        # Costs stay exact (four decimals, as the ledger keeps them): a CSV's total then equals what the budget says
        # was spent; pages round them with the one money rule.
        UsageRow(month, project, cluster, hardware, user, n, (Decimal(seconds) / hour).quantize(cent), cost, u)
        for (month, project, cluster, hardware, user, u), (n, seconds, cost) in ordered
    ]


def totals_by(rows: list[UsageRow], field: str) -> dict[str, Decimal]:
    totals: dict[str, Decimal] = defaultdict(Decimal)
    for row in rows:
        totals[f"{getattr(row, field)} ({row.unit})" if field != "month" else row.month] += row.cost
    return dict(sorted(totals.items()))
