"""Usage pages: what was spent, per project and site-wide, as charts, a table and CSV; and the budget page, which
says what a lower strict amount would cancel before saving it. Thin: the sums are in portal.usage.queries, the rules
in portal.budgets.actions and portal.usage.lowering."""

from __future__ import annotations

import csv
from decimal import Decimal

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render

from portal.accounts.models import SiteSettings
from portal.budgets import actions as budget_actions
from portal.budgets.forms import BudgetForm
from portal.budgets.queries import budget_of, budget_summary
from portal.jobs.models import Job
from portal.projects import access
from portal.usage import queries
from portal.usage.lowering import lowering

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


@login_required
def budget(request, slug: str):
    """A project's budget (owners and admins). A strict amount that would cancel jobs not ended is saved only once
    the person confirms, having been told which jobs and why (portal/usage/lowering.py)."""
    project = get_object_or_404(access.visible_projects(request.user), slug=slug)
    access.require(request.user, project, "manage")
    current = budget_of(project)
    effect = None
    if request.method == "POST":
        form = BudgetForm(request.POST)
        if form.is_valid():
            data = {k: v for k, v in form.cleaned_data.items() if k != "confirm_cancel"}
            effect = lowering(project, amount=data["amount"], strict=data["strict"])
            if effect is not None and not form.cleaned_data["confirm_cancel"]:
                form.add_error("confirm_cancel", "tick this to save the budget and let it cancel these jobs")
            else:
                try:
                    budget_actions.set_budget(project, actor=request.user, **data)
                except ValueError as exc:
                    form.add_error("unit", str(exc))
                else:
                    messages.success(request, f"The budget of {project.slug} is now {data['amount']} {data['unit']}.")
                    return redirect("project-detail", slug=project.slug)
    else:
        initial = ({"amount": current.amount.quantize(Decimal("0.01")), "unit": current.unit, "period": current.period,
                    "strict": current.strict} if current else {})
        form = BudgetForm(initial=initial)
    return render(request, "budgets/budget.html", {"project": project, "form": form, "budget": budget_summary(project),
                                                   "lowering": effect})
