"""Read helpers for the overview pages."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Count

from portal.audit.models import AuditEntry
from portal.budgets import actions as budgets
from portal.budgets.queries import budget_summary
from portal.clusters.models import Allocation, Cluster
from portal.jobs.models import ACTIVE_STATES, Job
from portal.projects import access
from portal.projects.models import Project
from portal.projects.queries import membership_page


@dataclass
class ProjectCard:
    project: Project
    role: str | None
    budget: budgets.BudgetSummary | None
    active_jobs: int


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
        **membership_page(user, project),
        "budget": budget_summary(project),
        "allocations": Allocation.objects.filter(project=project).select_related("cluster"),
        "jobs": Job.objects.filter(project=project).select_related("project", "cluster", "hardware", "user")[:50],
    }


def clusters_with_active_jobs() -> list[tuple[Cluster, int]]:
    """Every cluster with the number of its jobs not ended yet."""
    active = dict(Job.objects.filter(state__in=ACTIVE_STATES).values_list("cluster").annotate(n=Count("id")))
    return [(cluster, active.get(cluster.pk, 0)) for cluster in Cluster.objects.all()]


def cloud_stops(limit: int = 20):
    """The latest cloud jobs the reconciler stopped, from the audit log."""
    return AuditEntry.objects.filter(action="cloud.job_stopped").select_related("project")[:limit]
