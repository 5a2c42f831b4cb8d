from __future__ import annotations

from celery import shared_task

from portal.budgets.models import Budget
from portal.usage import enforcement


@shared_task
def enforce_budgets_task() -> list[dict]:
    reports = []
    for budget in Budget.objects.select_related("project").order_by("pk"):
        report = enforcement.enforce(budget)
        reports.append({"budget": report.budget_id, "cancelled": report.cancelled, "alerts": report.alerts})
    return reports


@shared_task
def remind_forgotten_jobs_task() -> list[int]:
    return enforcement.remind_forgotten_jobs()
