"""Overview pages: the dashboard, the projects, a project's page and its live budget bar, the site admin's page."""

from __future__ import annotations

from django.contrib.admin.views.decorators import staff_member_required
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.shortcuts import get_object_or_404, render

from portal.budgets.queries import budget_summary
from portal.catalog.models import HardwareType, Preset, Software
from portal.cloud.reconciler import cloud_now
from portal.clusters.forms import OperationsAccountForm
from portal.jobs.queries import visible_jobs
from portal.overview import queries
from portal.projects import access
from portal.sessions.tunnels import tunnel_warnings

DASHBOARD_PROJECTS = 12
PROJECTS_PAGE = 25


@login_required
def dashboard(request):
    """The first DASHBOARD_PROJECTS project cards (the project list pages through the rest) and the newest jobs."""
    shown = list(access.visible_projects(request.user)[: DASHBOARD_PROJECTS + 1])
    projects = queries.project_cards(request.user, shown[:DASHBOARD_PROJECTS])
    jobs = visible_jobs(request.user).order_by("-pk")[:10]
    return render(request, "dashboard.html", {"projects": projects, "jobs": jobs,
                                              "more_projects": len(shown) > DASHBOARD_PROJECTS})


@login_required
def project_list(request):
    """PROJECTS_PAGE cards a page: a site admin sees every project of the site."""
    page = Paginator(access.visible_projects(request.user), PROJECTS_PAGE).get_page(request.GET.get("page"))
    return render(request, "projects/list.html", {"projects": queries.project_cards(request.user, page.object_list),
                                                  "page": page})


@login_required
def project_detail(request, slug: str):
    project = get_object_or_404(access.visible_projects(request.user), slug=slug)
    return render(request, "projects/detail.html", queries.project_page(request.user, project))


@login_required
def budget_bar(request, slug: str):
    """The budget bar alone, polled by the project page so spending shows while jobs run."""
    project = get_object_or_404(access.visible_projects(request.user), slug=slug)
    return render(request, "partials/budget_bar.html", {"budget": budget_summary(project)})


@staff_member_required
def site_admin(request):
    """The site admin's overview: clusters and how they answer, hardware with prices and measured speed, software."""
    routes = queries.health_check_routes()
    for route in routes.values():
        if route.needs_account:
            route.form = OperationsAccountForm(prefix=route.cluster.slug, initial={
                "username": route.account.username if route.account else ""})
    hardware = list(HardwareType.objects.select_related("cluster"))
    for hw in hardware:
        hw.health_route = routes.get(hw.cluster_id)
    clusters = queries.clusters_with_active_jobs()
    warnings = tunnel_warnings(c for c, _ in clusters if c.enabled)
    return render(request, "catalog/site_admin.html", {
        "health_routes": sorted(routes.values(), key=lambda route: route.cluster.name),
        "clusters": clusters,
        "tunnel_warnings": [(c, warnings[c.pk]) for c, _ in clusters if c.pk in warnings],
        "hardware": hardware,
        "software": Software.objects.prefetch_related("clusters"),
        "presets": Preset.objects.all(),
        "cloud": cloud_now(),
        "cloud_stopped": queries.cloud_stops(),
    })
