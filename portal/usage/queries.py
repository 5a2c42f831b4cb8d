"""Usage: what was spent, by cluster, hardware, user and month, from the jobs' settled costs."""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC
from decimal import Decimal

from django.core.cache import cache
from django.db import connection
from django.db.models import Count, F, QuerySet, Sum, Value
from django.db.models.functions import Coalesce, ExtractMonth, ExtractYear, NullIf

from portal.budgets.actions import NoConversion, conversion
from portal.budgets.models import UnitConversion
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

    The database (PostgreSQL, or `make run`'s SQLite) groups and sums (one query, a row per group whatever the number
    of jobs: a project with 10,000 ended jobs is a few hundred rows here, not 10,000 models); conversions are applied
    per group, each looked up once."""
    return _rows(_grouped(jobs), unit)


def _rows(grouped, unit: str | None, lookup=conversion) -> list[UsageRow]:
    groups: dict[tuple, list] = defaultdict(lambda: [0, 0, Decimal("0")])
    conversions: dict[str, object] = {}  # from unit → its conversion to `unit` (or NoConversion): one lookup each
    for year, month, project, cluster, hardware, user, row_unit, n, node_seconds, cost in grouped:
        year, month = int(year), int(month)  # integers from the ORM; from a raw cursor too, whatever EXTRACT's type
        cost = cost or Decimal("0")
        if unit and row_unit != unit:
            if row_unit not in conversions:
                try:
                    conversions[row_unit] = lookup(row_unit, unit)
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


class Rows(Sequence):
    """The usage rows as the cache keeps them (tuples of text and integers: an entry of a year of a large project
    is read in a few milliseconds, where 6,000 pickled rows of Decimals took 15), made UsageRows when read: a page
    of the table reads a hundred, the CSV all."""

    def __init__(self, kept: list[tuple]):
        self.kept = kept

    @staticmethod
    def keep(rows: list[UsageRow]) -> list[tuple]:
        # Decimal ↔ str is exact, scale included: the CSV's text is the one computed.
        return [(r.month, r.project, r.cluster, r.hardware, r.user, r.jobs, str(r.node_hours), str(r.cost), r.unit)
                for r in rows]

    def __len__(self) -> int:
        return len(self.kept)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self._row(kept) for kept in self.kept[index]]
        return self._row(self.kept[index])

    @staticmethod
    def _row(kept: tuple) -> UsageRow:
        month, project, cluster, hardware, user, jobs, node_hours, cost, unit = kept
        return UsageRow(month, project, cluster, hardware, user, jobs, Decimal(node_hours), Decimal(cost), unit)


@dataclass
class Usage:
    """What a usage page shows: every row (the table pages through them, the CSV has them all) and the charts' sums."""

    rows: Rows
    charts: dict[str, dict[str, Decimal]]


CHARTS = ("month", "cluster", "hardware", "user")
# Only bounds how long a scope nobody opens keeps its entry, and how long a renamed slug or user name can show
# under its old name (names are not in the version); settled jobs and conversions are, so they show at once.
CACHE_SECONDS = 3600


def usage(jobs: QuerySet[Job], project_ids: list[int], unit: str | None = None) -> Usage:
    """`usage_rows` and the charts' `totals_by` of `jobs` (the jobs of the projects `project_ids`), computed once
    per version of the data and cached: a year of a large project is thousands of groups to sum in Python.

    The key holds the scope's project ids and the unit, so one user's scope is never read from another's entry.
    The version (settled jobs in scope: how many, the largest id, sums of what is grouped and summed, all read from
    the index job_project_newest alone; and every unit conversion) is read in the same statement as the groups,
    which PostgreSQL only computes when the version differs from the cached one: a settled job (or a re-costed one,
    or a changed conversion) shows at once, and a page costs one statement whether the entry was fresh or not."""
    if not project_ids:
        return Usage(Rows([]), {name: {} for name in CHARTS})
    if connection.vendor != "postgresql":
        # `make run`'s SQLite: the version statement is PostgreSQL's (hashtext, json_agg, MATERIALIZED). A demo's
        # jobs are few, so the groups are summed each time (one portable query) and nothing is cached.
        rows = usage_rows(jobs, unit)
        return Usage(Rows(Rows.keep(rows)), {name: totals_by(rows, name) for name in CHARTS})
    scope = hashlib.sha256(",".join(map(str, sorted(set(project_ids)))).encode()).hexdigest()
    key = f"usage:v2:{scope}:{unit or ''}"
    cached = cache.get(key)
    version, groups, factors = _version_and_groups(jobs, cached[0] if cached else None)
    if cached and cached[0] == version:
        return Usage(Rows(cached[2]), cached[1])
    rows = _rows(groups, unit, _lookup_in(factors))
    charts = {name: totals_by(rows, name) for name in CHARTS}
    kept = Rows.keep(rows)
    cache.set(key, (version, charts, kept), CACHE_SECONDS)
    return Usage(Rows(kept), charts)


def _grouped(jobs: QuerySet[Job]) -> QuerySet:
    # Year and month as integers, in UTC as the jobs' stamps say: no datetime to build and convert per group.
    ended = Coalesce("ended_at", "created_at")
    return (
        jobs.filter(cost_amount__isnull=False).order_by()
        .values_list(ExtractYear(ended, tzinfo=UTC), ExtractMonth(ended, tzinfo=UTC), "project__slug", "cluster__slug",
                     Coalesce("hardware__slug", Value("-")), "user__username",
                     Coalesce(NullIf("estimate_unit", Value("")), "hardware__rate_unit", Value("")))
        .annotate(n=Count("id"), node_seconds=Sum(Coalesce("elapsed_seconds", 0) * F("nodes")), cost=Sum("cost_amount"))
    )


# What a settled job's version is made of: every column the groups read of it, none outside the index.
VERSION_COLUMNS = ["id", "cost_amount", "elapsed_seconds", "nodes", "ended_at", "created_at", "user_id", "cluster_id",
                   "hardware_id", "estimate_unit"]


def _lookup_in(factors: list[list[str]] | None):
    """portal.budgets.actions.conversion, from the conversions read with the groups rather than a query each."""
    table = {(from_unit, to_unit): Decimal(factor) for from_unit, to_unit, factor in factors or []}

    def lookup(from_unit: str, to_unit: str):
        if from_unit == to_unit:
            return lambda amount: amount
        direct = table.get((from_unit, to_unit))
        if direct is not None:
            return lambda amount: amount * direct
        inverse = table.get((to_unit, from_unit))
        if inverse:
            return lambda amount: amount / inverse
        raise NoConversion(f"no conversion from {from_unit} to {to_unit} is set; ask a site admin to add one")

    return lookup


def _version_and_groups(jobs: QuerySet[Job], known: str | None) -> tuple[str, list[tuple], list | None]:
    """The data's version, the groups unless the version is `known` (then PostgreSQL does not compute them: the
    condition on the version is a one-time filter above the grouping, which is then never executed), and the unit
    conversions as (from, to, factor) text."""
    # Only columns of the index job_project_newest (Job.Meta.indexes), so that the version is an index-only scan.
    settled = jobs.filter(cost_amount__isnull=False).order_by().values(*VERSION_COLUMNS)
    settled_sql, settled_params = settled.query.sql_with_params()
    grouped_sql, grouped_params = _grouped(jobs).query.sql_with_params()
    conversions = UnitConversion._meta.db_table
    # Only Django's compiled SQL (its values stay parameters) and a model's table name are put in the text.
    factors_sql = f"SELECT json_agg(json_build_array(from_unit, to_unit, factor::text)) FROM {conversions}"  # noqa: S608
    factors_digest = (
        "SELECT coalesce(md5(string_agg(from_unit || ' ' || to_unit || ' ' || factor::text, ',' "  # noqa: S608
        f"ORDER BY from_unit, to_unit)), '') FROM {conversions}"
    )
    settled_version = (
        "SELECT concat_ws('/', count(*), max(id), sum(cost_amount), sum(coalesce(elapsed_seconds, 0) * nodes), "  # noqa: S608
        "sum(extract(epoch FROM coalesce(ended_at, created_at))), sum(user_id), sum(cluster_id), "
        f"sum(coalesce(hardware_id, 0)), sum(hashtext(estimate_unit))) FROM ({settled_sql}) s"
    )
    sql = (
        # MATERIALIZED and read by scalar subqueries: computed once, and the condition on it is a one-time filter
        # (a Result node PostgreSQL checks before running the grouping below it at all).
        f"WITH v AS MATERIALIZED (SELECT ({settled_version}) || '/' || ({factors_digest}) AS version) "  # noqa: S608
        f"SELECT (SELECT version FROM v), ({factors_sql}), g.* FROM (SELECT 1) one LEFT JOIN "
        f"(SELECT * FROM ({grouped_sql}) g0 WHERE (SELECT version FROM v) IS DISTINCT FROM %s) g ON true"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, (*settled_params, *grouped_params, known))
        fetched = cursor.fetchall()
    version, factors = fetched[0][0], fetched[0][1]
    if isinstance(factors, str):  # Django's psycopg setup may leave JSON undecoded
        factors = json.loads(factors)
    # One row of NULLs (the LEFT JOIN's) when there is no group or the version was known.
    return version, [row[2:] for row in fetched if row[2] is not None], factors
