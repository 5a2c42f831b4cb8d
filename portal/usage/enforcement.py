"""Budgets enforced during a run: burn of running jobs, strict cancellation, alerts, forgotten-job reminders."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal

from django.core.mail import send_mail
from django.db import IntegrityError, transaction
from django.utils import timezone

from portal.budgets import actions as budgets
from portal.budgets.display import amount_text
from portal.budgets.models import Budget, BudgetAlert
from portal.jobs import transitions
from portal.jobs.actions import cancel_for_budget
from portal.jobs.models import ACTIVE_STATES, Job, JobState
from portal.projects.models import Membership, Role


@dataclass
class EnforcementReport:
    budget_id: int
    used: Decimal
    burn: Decimal
    cancelled: list[int]
    alerts: list[int]


def burn(project) -> Decimal:
    """What the project's running jobs have cost so far (elapsed × nodes × rate), in the budget's unit."""
    now = timezone.now()
    total = Decimal("0")
    running = Job.objects.filter(project=project, state=JobState.RUNNING, hardware__isnull=False).select_related("hardware")
    for job in running:
        started = job.started_at or job.submitted_at or now
        seconds = max(int((now - started).total_seconds()), 0)
        total += budgets.cost(job.hardware.rate, job.hardware.rate_unit, job.nodes, seconds, job.estimate_unit or job.hardware.rate_unit).amount
    return total


def project_admin_emails(project) -> list[str]:
    members = Membership.objects.filter(project=project, role__in=[Role.OWNER, Role.ADMIN]).select_related("user")
    return sorted({m.user.email for m in members if m.user.email})


def enforce(budget: Budget) -> EnforcementReport:
    summary = budgets.summary(budget)
    current_burn = burn(budget.project)
    used = summary.spent + current_burn
    cancelled: list[int] = []
    if budget.strict and budget.amount > 0 and used >= budget.amount:
        reason = (
            f"cancelled by the project's strict budget: {budget.project.slug} reached its {amount_text(budget.amount)} "
            f"{budget.unit} (spent {amount_text(summary.spent)} + running jobs {amount_text(current_burn)})"
        )
        for job_id in Job.objects.filter(project=budget.project, state__in=ACTIVE_STATES, cancel_requested_at__isnull=True).order_by("pk").values_list("pk", flat=True):
            cancel_for_budget(job_id, reason)
            cancelled.append(job_id)
    alerts = send_alerts(budget, used, summary)
    return EnforcementReport(budget.pk, used, current_burn, cancelled, alerts)


def send_alerts(budget: Budget, used: Decimal, summary: budgets.BudgetSummary) -> list[int]:
    if budget.amount <= 0:
        return []
    percent = used / budget.amount * 100
    sent = []
    for threshold in budget.thresholds():
        if percent < threshold:
            continue
        try:
            with transaction.atomic():
                BudgetAlert.objects.create(budget=budget, period_start=summary.period_start, threshold=threshold)
        except IntegrityError:
            continue  # already announced this period
        recipients = project_admin_emails(budget.project)
        if recipients:
            kind = "strict: new jobs are refused and running ones cancelled" if budget.strict and threshold >= 100 else (
                "soft: jobs still run" if threshold >= 100 else "")
            send_mail(
                subject=f"[Kakehashi] {budget.project.name}: {threshold}% of the budget used",
                message=(
                    f"Project {budget.project.name} ({budget.project.slug}) has used {amount_text(used)} of {amount_text(budget.amount)} "
                    f"{budget.unit} ({percent:.0f}%) this period, counting running jobs.\n"
                    f"Reserved by queued and running jobs: {amount_text(summary.reserved)} {budget.unit}.\n"
                    + (f"The budget is {kind}.\n" if kind else "")
                ),
                from_email=None,
                recipient_list=recipients,
            )
        sent.append(threshold)
    return sent


def remind_forgotten_jobs() -> list[int]:
    """Tell the owner of a job that has run longer than its project's reminder threshold (once per job)."""
    now = timezone.now()
    reminded = []
    jobs = Job.objects.filter(state=JobState.RUNNING, reminded_at__isnull=True, project__remind_after_hours__isnull=False).select_related("project", "user")
    for job in jobs:
        started = job.started_at or job.submitted_at
        if started is None or now - started < timedelta(hours=job.project.remind_after_hours):
            continue
        if not transitions.mark_reminded(job.pk, now):
            continue
        if job.user.email:
            hours = (now - started).total_seconds() / 3600
            send_mail(
                subject=f"[Kakehashi] job {job.name} has been running for {hours:.0f} hours",
                message=(
                    f"Your job {job.name} (#{job.pk}) in project {job.project.slug} on {job.cluster.name} has been "
                    f"running for {hours:.1f} hours. If you forgot it, cancel it to stop spending the budget."
                ),
                from_email=None,
                recipient_list=[job.user.email],
            )
        reminded.append(job.pk)
    return reminded
