"""Usage pages: what was spent, per project and site-wide, as charts, a table and CSV. Thin: the sums are in
portal.usage.queries."""

from __future__ import annotations

import csv

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, render

from portal.accounts.models import SiteSettings
from portal.budgets.queries import budget_of
from portal.jobs.models import Job
from portal.projects import access
from portal.usage import queries

TABLE_PAGE = 100  # rows of the usage table a page shows; the CSV has them all

def _usage_response(request, project_ids: list[int], title: str, unit: str | None, filename: str):
    usage = queries.usage(Job.objects.filter(project_id__in=project_ids), project_ids, unit)
    rows = usage.rows
    if request.GET.get("format") == "csv":
        response = HttpResponse(content_type="text/csv")
        response["Content-Disposition"] = f'attachment; filename="{filename}.csv"'
        writer = csv.writer(response)
        writer.writerow(["month", "project", "cluster", "hardware", "user", "jobs", "node_hours", "cost", "unit"])
        for r in rows:
            writer.writerow([r.month, r.project, r.cluster, r.hardware, r.user, r.jobs, r.node_hours, r.cost, r.unit])
        return response
    chart_data = {name: {"labels": list(data), "values": [float(v) for v in data.values()]}
                  for name, data in usage.charts.items()}
    # The charts sum every row; the table shows a page of them (a year of a large project is thousands of
    # month × hardware × user rows): the rows are already in memory, so a page costs no query.
    page = Paginator(rows, TABLE_PAGE).get_page(request.GET.get("page"))
    return render(request, "budgets/usage.html", {"title": title, "rows": rows, "page": page, "chart_data": chart_data,
                                                  "unit": unit})


@login_required
def project_usage(request, slug: str):
    project = get_object_or_404(access.visible_projects(request.user), slug=slug)
    budget_row = budget_of(project)
    response = _usage_response(
        request, [project.pk], f"Usage of {project.name}", budget_row.unit if budget_row else None,
        f"usage-{project.slug}",
    )
    return response


@login_required
def site_usage(request):
    """Site admins see every project (in the reporting unit); researchers see the projects they are in."""
    # The ids themselves: they are the cache entry's key (portal.usage.queries.usage), so no scope reads another's.
    project_ids = list(access.visible_projects(request.user).values_list("pk", flat=True))
    title = "Usage across all projects" if request.user.is_staff else "Usage of your projects"
    unit = SiteSettings.current().reporting_unit or settings.KAKEHASHI_REPORTING_UNIT
    return _usage_response(request, project_ids, title, unit, "usage")
