"""Every row lock taken on budgets, by name (Saleor's `lock_objects.py` shape).

A budget row is locked last: after the job rows of the same transaction (portal/jobs/locks.py), never before
them. All reservations of a project are serialised on its budget row, which is what makes concurrent submits
unable to overspend together (docs/decisions/0006). Call inside a transaction.
"""

from __future__ import annotations

from portal.budgets.models import Budget


def budget_of_project(project_id: int) -> Budget | None:
    return Budget.objects.select_for_update().filter(project_id=project_id).first()


def budgets(budget_ids: list[int]) -> list[Budget]:
    """Several budget rows (the endings of a tracking cycle may charge several projects), in pk order."""
    return list(Budget.objects.select_for_update().filter(pk__in=budget_ids).order_by("pk"))


def budget(budget_id: int) -> Budget | None:
    return Budget.objects.select_for_update().filter(pk=budget_id).first()


def budget_or_new(project, defaults: dict) -> tuple[Budget, bool]:
    """The project's budget, locked, or a new one with `defaults` (and whether it is new)."""
    return Budget.objects.select_for_update().get_or_create(project=project, defaults=defaults)
