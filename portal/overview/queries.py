"""Read helpers for the overview pages."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Count

from portal.audit.models import AuditEntry
from portal.budgets import actions as budgets_actions
from portal.budgets.models import Budget
from portal.budgets.queries import budget_summary
from portal.clusters.connect import reach_of
from portal.clusters.models import Allocation, Cluster, ClusterAccount
from portal.jobs.models import ACTIVE_STATES, Job
from portal.projects import access
from portal.projects.models import Membership, Project, Role
from portal.projects.queries import membership_page

PROJECT_JOBS = 50  # the newest jobs a project's page lists
PROJECT_MEMBERS = 12  # the members its card names; the members page has them all


@dataclass
class ProjectCard:
    project: Project
    role: str | None
    budget: budgets_actions.BudgetSummary | None
    active_jobs: int


def project_cards(user, projects=None) -> list[ProjectCard]:
    """A card per project (by default every project `user` can see): role, budget and active jobs, read for all
    the cards at once (four queries however many cards; pass a page of projects for a bounded list)."""
    projects = list(access.visible_projects(user) if projects is None else projects)
    ids = [project.pk for project in projects]
    roles = {} if user.is_staff else dict(
        Membership.objects.filter(user=user, project_id__in=ids).values_list("project_id", "role"))
    budgets = {budget.project_id: budget for budget in Budget.objects.filter(project_id__in=ids)}
    summaries = budgets_actions.summaries(list(budgets.values()))
    active = dict(Job.objects.filter(project_id__in=ids, state__in=ACTIVE_STATES).order_by()
                  .values_list("project_id").annotate(n=Count("id")))
    return [
        ProjectCard(
            project=project,
            role=Role.OWNER if user.is_staff else roles.get(project.pk),  # as access.role_of says it
            budget=summaries[budgets[project.pk].pk] if project.pk in budgets else None,
            active_jobs=active.get(project.pk, 0),
        )
        for project in projects
    ]


def project_page(user, project: Project) -> dict:
    jobs = list(Job.objects.filter(project=project).select_related("project", "cluster", "hardware", "user")
                .order_by("-pk")[:PROJECT_JOBS + 1])
    return {
        **membership_page(user, project, limit=PROJECT_MEMBERS),
        "budget": budget_summary(project),
        "allocations": Allocation.objects.filter(project=project).select_related("cluster"),
        # The newest jobs; the rest are the job list's keyset pages, filtered to this project.
        "jobs": jobs[:PROJECT_JOBS],
        "more_jobs": len(jobs) > PROJECT_JOBS,
    }


def clusters_with_active_jobs() -> list[tuple[Cluster, int]]:
    """Every cluster with the number of its jobs not ended yet."""
    active = dict(Job.objects.filter(state__in=ACTIVE_STATES).values_list("cluster").annotate(n=Count("id")))
    return [(cluster, active.get(cluster.pk, 0)) for cluster in Cluster.objects.select_related("health")]


@dataclass
class HealthCheckRoute:
    """How a site admin runs the health check on a cluster's hardware: in which project, as which account, or what
    is still to set up (on the site page itself: docs/decisions/0036)."""

    cluster: Cluster
    project: Project | None
    account: ClusterAccount | None = None  # the operations project's service account, where the cluster needs one
    needs_account: bool = False

    @property
    def ready(self) -> bool:
        return self.project is not None and (not self.needs_account or self.account is not None)


def health_check_routes() -> dict[int, HealthCheckRoute]:
    """Per cluster id: the operations project (and its service account) that runs site admins' health checks there.
    A cluster reached without an account (the portal host, a cloud API) needs only the project's allocation."""
    allocations = {a.cluster_id: a for a in
                   Allocation.objects.filter(project__operations=True).select_related("project").order_by("-project__slug")}
    accounts = {a.cluster_id: a for a in
                ClusterAccount.objects.filter(project__operations=True).order_by("-project__slug")}
    routes: dict[int, HealthCheckRoute] = {}
    for cluster in Cluster.objects.all():
        allocation = allocations.get(cluster.pk)
        needs = reach_of(cluster).uses_cluster_account
        account = accounts.get(cluster.pk) if needs else None
        if account is not None and allocation is not None and account.project_id != allocation.project_id:
            account = None
        routes[cluster.pk] = HealthCheckRoute(cluster, allocation.project if allocation else None, account, needs)
    return routes


def cloud_stops(limit: int = 20):
    """The latest cloud jobs the reconciler stopped, from the audit log."""
    return AuditEntry.objects.filter(action="cloud.job_stopped").select_related("project")[:limit]
