"""What saving a strict budget does to the jobs that run (issue 25): the enforcer (portal/usage/enforcement.py)
cancels every job of the project not ended once spending plus the running jobs' cost so far reaches the amount, so
lowering the amount may cancel them at once, or before they end. The budget page says which, and asks first."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

from portal.budgets import actions as budgets
from portal.budgets.display import amount_text
from portal.budgets.queries import budget_of
from portal.jobs.models import ACTIVE_STATES, Job
from portal.usage.enforcement import burn


@dataclass
class Lowering:
    """The jobs a new strict amount cancels: at once (`now`), or once their cost reaches it (`later`)."""

    amount: Decimal
    unit: str
    spent: Decimal
    burn: Decimal
    reserved: Decimal
    now: bool
    jobs: list[Job] = field(default_factory=list)

    @property
    def text(self) -> str:
        names = ", ".join(job.name for job in self.jobs)
        new = f"{amount_text(self.amount)} {self.unit}"
        if self.now:
            return (f"Saving a strict budget of {new} cancels {len(self.jobs)} job(s) at once: {names}. Spent "
                    f"{amount_text(self.spent)} + their cost so far {amount_text(self.burn)} already reaches it.")
        return (f"Saving a strict budget of {new} leaves {len(self.jobs)} job(s) less than they reserved "
                f"({amount_text(self.reserved)} reserved, {amount_text(self.spent)} spent): {names}. The strict "
                "budget cancels them when spending reaches it, before they end.")


def lowering(project, *, amount: Decimal, strict: bool) -> Lowering | None:
    """What saving a strict budget of `amount` would do to `project`'s jobs not ended; None when nothing."""
    budget = budget_of(project)
    if not strict or amount <= 0 or budget is None:  # amount 0: the enforcer never cancels (no limit set)
        return None
    jobs = list(Job.objects.filter(project=project, state__in=ACTIVE_STATES, cancel_requested_at__isnull=True)
                .order_by("pk"))
    if not jobs:
        return None
    summary = budgets.summary(budget)
    cost_so_far = burn(project)
    if summary.spent + cost_so_far >= amount:
        return Lowering(amount, budget.unit, summary.spent, cost_so_far, summary.reserved, True, jobs)
    if summary.spent + summary.reserved > amount:
        return Lowering(amount, budget.unit, summary.spent, cost_so_far, summary.reserved, False, jobs)
    return None
