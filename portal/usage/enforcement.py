"""Budgets enforced during a run: burn of running jobs, strict cancellation, alerts, forgotten-job reminders.

Everything it tells people goes through portal/notifications (the bell, email after commit, each person's
choices): a budget passing a threshold tells the project's owners and admins; a strict budget that cancels jobs
tells them which, with the figures (each job's owner hears it from the job's own ending, which says the same
figures); a job running longer than the project's reminder threshold tells its owner once, and its history says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal

from django.db import IntegrityError, transaction
from django.utils import timezone

from portal.budgets import actions as budgets
from portal.budgets.display import amount_text
from portal.budgets.models import Budget, BudgetAlert
from portal.jobs import events, transitions
from portal.jobs.actions.cancel import cancel_for_budget
from portal.jobs.models import ACTIVE_STATES, Job, JobState
from portal.notifications.actions import Notice, tell
from portal.notifications.models import Kind
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


def project_managers(project) -> list[int]:
    """The user ids of the project's owners and admins: whom its budget's news goes to."""
    return sorted(Membership.objects.filter(project=project, role__in=[Role.OWNER, Role.ADMIN])
                  .values_list("user_id", flat=True))


def enforce(budget: Budget) -> EnforcementReport:
    summary = budgets.summary(budget)
    current_burn = burn(budget.project)
    used = summary.spent + current_burn
    cancelled: list[int] = []
    if budget.strict and budget.amount > 0 and used >= budget.amount:
        ask = events.by_budget(project=budget.project.slug, used=amount_text(used), amount=amount_text(budget.amount),
                               unit=budget.unit, spent=amount_text(summary.spent), running=amount_text(current_burn))
        jobs = list(Job.objects.filter(project=budget.project, state__in=ACTIVE_STATES, cancel_requested_at__isnull=True)
                    .order_by("pk").values_list("pk", "name", "user__username", "kind"))
        for job_id, *_ in jobs:
            cancel_for_budget(job_id, ask)
            cancelled.append(job_id)
        if jobs:
            _tell_managers_of_cancels(budget, ask, jobs)
    alerts = send_alerts(budget, used, summary)
    return EnforcementReport(budget.pk, used, current_burn, cancelled, alerts)


def _tell_managers_of_cancels(budget: Budget, ask: events.CancelAsk, jobs: list[tuple[int, str, str, str]]) -> None:
    project = budget.project
    # An interactive session is named as one: its owner loses an open JupyterLab, not a batch run.
    listed = "\n".join(f"- {'session' if kind == Job.Kind.SESSION else 'job'} {pk} {name} ({owner})"
                       for pk, name, owner, kind in jobs)
    text = (f"Project {project.slug}'s strict budget is used up ({ask.data['used']} of {ask.data['amount']} "
            f"{budget.unit}): {len(jobs)} job(s) cancelled")
    details = (f"{ask.words}.\nCancelled:\n{listed}\n\nRaise the budget on the project's Budget page to run more jobs; "
               "new jobs are refused until then.")
    with transaction.atomic():
        tell([Notice(user_id=user_id, kind=Kind.BUDGET_ALERT, text=text, details=details,
                     link=f"/projects/{project.slug}/budget/", project_id=project.pk)
              for user_id in project_managers(project)])


def send_alerts(budget: Budget, used: Decimal, summary: budgets.BudgetSummary) -> list[int]:
    """Tell the project's owners and admins, once a period, that its budget passed each of its thresholds."""
    if budget.amount <= 0:
        return []
    percent = used / budget.amount * 100
    sent = []
    project = budget.project
    for threshold in budget.thresholds():
        if percent < threshold:
            continue
        try:
            with transaction.atomic():
                BudgetAlert.objects.create(budget=budget, period_start=summary.period_start, threshold=threshold)
                kind = "strict: new jobs are refused and running ones cancelled" if budget.strict and threshold >= 100 \
                    else ("soft: jobs still run" if threshold >= 100 else "")
                text = f"Project {project.slug} has used {threshold}% of its budget"
                details = (
                    f"Project {project.name} ({project.slug}) has used {amount_text(used)} of "
                    f"{amount_text(budget.amount)} {budget.unit} ({percent:.0f}%) this period, counting running jobs.\n"
                    f"Reserved by queued and running jobs: {amount_text(summary.reserved)} {budget.unit}."
                    + (f"\nThe budget is {kind}." if kind else ""))
                tell([Notice(user_id=user_id, kind=Kind.BUDGET_ALERT, text=text, details=details,
                             link=f"/projects/{project.slug}/budget/", project_id=project.pk)
                      for user_id in project_managers(project)])
        except IntegrityError:
            continue  # already announced this period
        sent.append(threshold)
    return sent


def remind_forgotten_jobs() -> list[int]:
    """Tell the owner of a job that has run longer than its project's reminder threshold (once per job); the job's
    history says so."""
    now = timezone.now()
    reminded = []
    jobs = (Job.objects.filter(state=JobState.RUNNING, reminded_at__isnull=True, project__remind_after_hours__isnull=False)
            .select_related("project", "cluster"))
    for job in jobs:
        started = job.started_at or job.submitted_at
        threshold = job.project.remind_after_hours
        if started is None or now - started < timedelta(hours=threshold):
            continue
        hours = (now - started).total_seconds() / 3600
        with transaction.atomic():
            # Once per job, whoever else runs this at the same moment (a compare-and-set on reminded_at).
            if not transitions.update([job], where={"reminded_at__isnull": True}, stamp=False, reminded_at=now):
                continue
            transitions.note(job, events.reminded(hours, threshold))
            tell([Notice(user_id=job.user_id, kind=Kind.REMINDER, link=f"/jobs/{job.pk}/", job_id=job.pk,
                         project_id=job.project_id,
                         text=f"Job {job.name} ({job.project.slug}) has been running for {hours:.0f} hours",
                         details=(f"Your job {job.name} (#{job.pk}) in project {job.project.slug} on {job.cluster.name} "
                                  f"has been running for {hours:.1f} hours. If you forgot it, cancel it to stop "
                                  "spending the budget."))])
        reminded.append(job.pk)
    return reminded
