"""Read helpers for the overview pages."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Count

from portal.audit.models import AuditEntry
from portal.budgets import actions as budgets
from portal.budgets.queries import budget_summary
from portal.clusters.connect import reach_of
from portal.clusters.models import Allocation, Cluster, ClusterAccount
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


@dataclass
class HealthCheckRoute:
    """How a site admin runs the health check on a cluster's hardware: in which project, or why not yet."""

    project: Project | None
    missing: str = ""  # what the site must set up first


def health_check_routes() -> dict[int, HealthCheckRoute]:
    """Per cluster id: the operations project whose service account runs site admins' health checks there.
    A cluster reached without an account (the portal host, a cloud API) needs only the project's allocation."""
    routes: dict[int, HealthCheckRoute] = {}
    allocations = Allocation.objects.filter(project__operations=True).select_related("project", "cluster")
    ready = {(a.cluster_id, a.project_id) for a in ClusterAccount.objects.filter(project__operations=True)}
    for allocation in allocations.order_by("project__slug"):
        cluster = allocation.cluster
        if allocation.cluster_id in routes and routes[allocation.cluster_id].project is not None:
            continue
        if not reach_of(cluster).uses_cluster_account or (cluster.pk, allocation.project_id) in ready:
            routes[cluster.pk] = HealthCheckRoute(allocation.project)
    for cluster in Cluster.objects.exclude(pk__in=list(routes)):
        if reach_of(cluster).uses_cluster_account:
            routes[cluster.pk] = HealthCheckRoute(
                None, f"python manage.py service_account {cluster.slug} USERNAME (then install the key it prints)")
    return routes


def cloud_stops(limit: int = 20):
    """The latest cloud jobs the reconciler stopped, from the audit log."""
    return AuditEntry.objects.filter(action="cloud.job_stopped").select_related("project")[:limit]
