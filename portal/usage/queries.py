"""Usage: what was spent, by cluster, hardware, user and month, from the jobs' settled costs."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from decimal import Decimal

from django.db.models import QuerySet

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
    """Settled jobs grouped by month × project × cluster × hardware × user; costs converted to `unit` if given."""
    groups: dict[tuple, list] = defaultdict(lambda: [0, Decimal("0"), Decimal("0")])
    conversions: dict[str, object] = {}  # from unit → its conversion to `unit` (or NoConversion): one lookup each
    for job in jobs.filter(cost_amount__isnull=False).select_related("project", "cluster", "hardware", "user"):
        cost_unit = job.estimate_unit or (job.hardware.rate_unit if job.hardware else "")
        cost = job.cost_amount or Decimal("0")
        if unit and cost_unit != unit:
            if cost_unit not in conversions:
                try:
                    conversions[cost_unit] = conversion(cost_unit, unit)
                except NoConversion as exc:
                    conversions[cost_unit] = exc
            if callable(conversions[cost_unit]):
                cost, cost_unit = conversions[cost_unit](cost), unit
            # else: shown in its own unit rather than silently wrong
        key = (
            (job.ended_at or job.created_at).strftime("%Y-%m"),
            job.project.slug,
            job.cluster.slug,
            job.hardware.slug if job.hardware else "-",
            job.user.username,
            cost_unit,
        )
        row = groups[key]
        row[0] += 1
        row[1] += Decimal(job.elapsed_seconds or 0) * job.nodes / Decimal(3600)
        row[2] += cost
    return [
        # Costs stay exact (four decimals, as the ledger keeps them): a CSV's total then equals what the budget says
        # was spent; pages round them with the one money rule.
        UsageRow(month, project, cluster, hardware, user, n, hours.quantize(Decimal("0.01")), cost, u)
        for (month, project, cluster, hardware, user, u), (n, hours, cost) in sorted(groups.items())
    ]


def totals_by(rows: list[UsageRow], field: str) -> dict[str, Decimal]:
    totals: dict[str, Decimal] = defaultdict(Decimal)
    for row in rows:
        totals[f"{getattr(row, field)} ({row.unit})" if field != "month" else row.month] += row.cost
    return dict(sorted(totals.items()))
