"""Read helpers for project pages."""

from __future__ import annotations

from dataclasses import dataclass

from portal.budgets import actions as budgets
from portal.budgets.models import Budget
from portal.clusters.models import Allocation
from portal.jobs.models import ACTIVE_STATES, Job
from portal.projects import access
from portal.projects.models import Membership, Project


@dataclass
class ProjectCard:
    project: Project
    role: str | None
    budget: budgets.BudgetSummary | None
    active_jobs: int


def budget_summary(project: Project) -> budgets.BudgetSummary | None:
    budget = Budget.objects.filter(project=project).first()
    return budgets.summary(budget) if budget else None


def project_cards(user) -> list[ProjectCard]:
    cards = []
    for project in access.visible_projects(user):
        cards.append(
            ProjectCard(
                project=project,
                role=access.role_of(user, project),
                budget=budget_summary(project),
                active_jobs=Job.objects.filter(project=project, state__in=ACTIVE_STATES).count(),
            )
        )
    return cards


def project_page(user, project: Project) -> dict:
    return {
        "project": project,
        "role": access.role_of(user, project),
        "can_submit": access.can(user, project, "submit"),
        "can_manage": access.can(user, project, "manage"),
        "budget": budget_summary(project),
        "members": Membership.objects.filter(project=project).select_related("user").order_by("user__username"),
        "allocations": Allocation.objects.filter(project=project).select_related("cluster"),
        "jobs": Job.objects.filter(project=project).select_related("cluster", "hardware", "user")[:50],
    }
