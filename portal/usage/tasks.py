from __future__ import annotations

from celery import shared_task

from portal.budgets.models import Budget
from portal.usage import cloud, enforcement


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


@shared_task
def reconcile_cloud_task() -> list[dict]:
    """Stop what AWS runs that the portal does not know or that ran past its walltime (portal/usage/cloud.py)."""
    return [{"cluster": r.cluster, "running": len(r.running), "stopped": [s.scheduler_id for s in r.stopped],
             "error": r.error} for r in cloud.reconcile_all()]
