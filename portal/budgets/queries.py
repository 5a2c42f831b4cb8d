"""Read helpers for budgets."""

from __future__ import annotations

from portal.budgets import actions
from portal.budgets.models import Budget


def budget_of(project) -> Budget | None:
    """The project's budget (a project has at most one), or None."""
    return Budget.objects.filter(project=project).first()


def budget_summary(project) -> actions.BudgetSummary | None:
    """Amount, reserved, spent and available this period, or None without a budget."""
    budget = budget_of(project)
    return actions.summary(budget) if budget else None
