"""Read helpers for jobs."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from django.db.models import Count, Max, Q, QuerySet, Sum

from portal.jobs.models import FINAL_STATES, Job, JobState
from portal.projects import access


def visible_jobs(user) -> QuerySet[Job]:
    """Jobs of the projects `user` can see: the one filter every job page and API call starts from.

    The user's project ids are read first and sent as constants (`project_id IN (1, 2, 3)`), not as a subquery:
    PostgreSQL then knows from its statistics how many jobs those projects hold and walks the newest jobs by id
    for a large project instead of sorting all of its jobs (at 100,000 jobs: 0.7 ms against 65 ms for a page of
    the job list, bench/pages.py). Site staff see every project, so their jobs need no filter at all."""
    jobs = Job.objects.select_related("project", "user", "cluster", "hardware", "software")
    if getattr(user, "is_staff", False) and getattr(user, "is_authenticated", False):
        return jobs.all()
    return jobs.filter(project_id__in=list(access.visible_projects(user).values_list("pk", flat=True)))


@dataclass
class SweepTotals:
    """A whole sweep's figures, however many of its points a page shows."""

    by_state: dict[str, int]  # each state (its value) → how many of the sweep's jobs are in it
    settled: Decimal  # what the ended points cost
    reserved: Decimal  # still reserved for points not settled yet
    estimate: Decimal  # what all of its jobs reserved when submitted
    unit: str

    @property
    def jobs(self) -> int:
        return sum(self.by_state.values())

    @property
    def counts(self) -> dict[str, int]:
        """Each state's label → its jobs, in JobState's order (as the page shows them)."""
        return {label: self.by_state[value] for value, label in JobState.choices if value in self.by_state}

    @property
    def active(self) -> int:
        """Jobs not ended yet: what "Cancel the sweep" would cancel, and why the page keeps polling."""
        return sum(n for state, n in self.by_state.items() if state not in FINAL_STATES)

    @property
    def failed(self) -> bool:
        """Some job failed or ran out of time (the sweep may have points to re-run)."""
        return any(self.by_state.get(state) for state in (JobState.FAILED, JobState.TIMED_OUT))

    @property
    def total(self) -> Decimal:
        return self.settled + self.reserved


def sweep_totals(jobs: QuerySet[Job]) -> SweepTotals:
    """A sweep's totals in one GROUP BY state, summed by PostgreSQL: a page of 100 points of a 1,000-point sweep
    still shows what all 1,000 cost and where they are."""
    rows = list(jobs.order_by().values("state").annotate(
        n=Count("pk"), settled=Sum("cost_amount"), estimate=Sum("estimate_amount"),
        unsettled=Sum("estimate_amount", filter=Q(cost_amount__isnull=True)), unit=Max("estimate_unit")))
    zero = Decimal(0)
    return SweepTotals(
        by_state={row["state"]: row["n"] for row in rows},
        settled=sum((row["settled"] or zero for row in rows), zero),
        # A job that ended without a charge (cancelled before it ran) holds no reservation any more.
        reserved=sum((row["unsettled"] or zero for row in rows if row["state"] not in FINAL_STATES), zero),
        estimate=sum((row["estimate"] or zero for row in rows), zero),
        unit=next((row["unit"] for row in rows if row["unit"]), ""),
    )
