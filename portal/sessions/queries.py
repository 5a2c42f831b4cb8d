"""Reading sessions: which a person sees, and the figures its pages, the API, the spawner and Lab's status bar show
(time left, cost so far, budget left, the walltime warnings, why it ended). Plain functions over the rows."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from django.db.models import QuerySet
from django.utils import timezone

from portal.budgets import actions as budgets
from portal.budgets.queries import budget_of
from portal.catalog import queries as catalog
from portal.catalog.models import HardwareType, Software
from portal.clusters.connect import cloud_kinds
from portal.jobs.models import FINAL_STATES, Job, JobState
from portal.jobs.queries import visible_jobs
from portal.projects.models import Project
from portal.sessions.models import Session, SessionApp

# Lab's status bar warns this many minutes before the walltime ends (batchspawner#120: save your work).
WARN_MINUTES = (15, 5)


def visible_sessions(user) -> QuerySet[Session]:
    """Sessions of the projects `user` may see (the jobs' rule: visible_jobs)."""
    return (Session.objects.filter(job__in=visible_jobs(user).filter(kind=Job.Kind.SESSION))
            .select_related("job", "job__project", "job__hardware", "job__software", "job__cluster", "job__user", "app")
            .order_by("-job_id"))


@dataclass(frozen=True)
class Figures:
    ends_at: datetime | None  # when the walltime runs out (once running)
    seconds_left: int | None
    cost_so_far: budgets.Money | None
    budget_left: budgets.Money | None
    warning: str  # "", or the words Lab shows 15 and 5 minutes before the end
    ended_why: str  # once ended: the reason of its last event, as its page says it


def figures(session: Session, now: datetime | None = None) -> Figures:
    job = session.job
    now = now or timezone.now()
    ends_at = job.started_at + timedelta(seconds=job.walltime_seconds) if job.started_at else None
    left = max(0, int((ends_at - now).total_seconds())) if ends_at and job.state == JobState.RUNNING else None
    cost = job.cost
    if cost is None and job.started_at and job.hardware and job.estimate_unit:
        elapsed = int(((job.ended_at or now) - job.started_at).total_seconds())
        cost = budgets.cost(job.hardware.rate, job.hardware.rate_unit, job.nodes, min(elapsed, job.walltime_seconds),
                            job.estimate_unit)
    budget = budget_of(job.project)
    left_money = None
    if budget is not None:
        summary = budgets.summary(budget)
        # What is reserved for this session is still the session's to spend: count only what it has used.
        reserved_here = (job.estimate_amount or Decimal(0)) if job.state not in FINAL_STATES else Decimal(0)
        used_here = cost.amount if cost is not None and job.state not in FINAL_STATES else Decimal(0)
        left_money = budgets.Money(summary.available + reserved_here - used_here, summary.unit)
    warning = ""
    if left is not None:
        for minutes in sorted(WARN_MINUTES):
            if left <= minutes * 60:
                warning = (f"This session ends in {max(1, -(-left // 60))} minute(s), at its walltime: save your work "
                           "now.")
                break
    ended_why = ""
    if job.state in FINAL_STATES:
        last = job.events.order_by("-id").first()
        ended_why = (last.reason if last else "") or job.state_reason or job.get_state_display()
    return Figures(ends_at, left, cost, left_money, warning, ended_why)


@dataclass(frozen=True)
class Choices:
    """What a person may start a session with: the portal's New form and the hub's spawn page offer the same."""

    projects: QuerySet[Project]
    apps: QuerySet[SessionApp]
    software: QuerySet[Software]  # software providing what an enabled app needs (JupyterLab)
    hardware: QuerySet[HardwareType]  # on clusters that offer sessions
    projects_of_hardware: dict[int, set[int]]  # hardware id -> the ids of the projects that may use it


def session_choices(user) -> Choices:
    projects = catalog.submittable_projects(user)
    apps = SessionApp.objects.filter(enabled=True).order_by("pk")
    needs: set[str] = set()
    for app in apps:
        needs |= set(app.needs or [])
    software = Software.objects.filter(
        pk__in=[s.pk for s in catalog.software_for_projects(projects) if set(s.provides or []) & needs or not needs])
    by_project = catalog.hardware_by_project(projects)
    # No sessions on a cloud API's clusters (sessions.actions.offers_sessions says why).
    hardware = catalog.hardware_of(by_project).exclude(cluster__kind__in=cloud_kinds())
    projects_of: dict[int, set[int]] = {}
    for project_id, ids in by_project.items():
        for pk in ids:
            projects_of.setdefault(pk, set()).add(project_id)
    return Choices(projects, apps, software, hardware, projects_of)
