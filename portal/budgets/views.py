"""Budget and usage pages: thin; the rules are in portal.budgets.actions and queries."""

from __future__ import annotations

import csv
from decimal import Decimal

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render

from portal.budgets import actions, queries
from portal.budgets.forms import BudgetForm
from portal.budgets.models import Budget
from portal.jobs.models import Job
from portal.projects import access
from portal.projects.queries import budget_summary


@login_required
def budget(request, slug: str):
    project = get_object_or_404(access.visible_projects(request.user), slug=slug)
    access.require(request.user, project, "manage")
    current = Budget.objects.filter(project=project).first()
    if request.method == "POST":
        form = BudgetForm(request.POST)
        if form.is_valid():
            try:
                actions.set_budget(project, actor=request.user, **form.cleaned_data)
            except ValueError as exc:
                form.add_error("unit", str(exc))
            else:
                messages.success(request, f"The budget of {project.slug} is now {form.cleaned_data['amount']} {form.cleaned_data['unit']}.")
                return redirect("project-detail", slug=project.slug)
    else:
        initial = ({"amount": current.amount.quantize(Decimal("0.01")), "unit": current.unit, "period": current.period,
                    "strict": current.strict} if current else {})
        form = BudgetForm(initial=initial)
    return render(request, "budgets/budget.html", {"project": project, "form": form, "budget": budget_summary(project)})


def _usage_response(request, jobs, title: str, unit: str | None, filename: str):
    rows = queries.usage_rows(jobs, unit)
    if request.GET.get("format") == "csv":
        response = HttpResponse(content_type="text/csv")
        response["Content-Disposition"] = f'attachment; filename="{filename}.csv"'
        writer = csv.writer(response)
        writer.writerow(["month", "project", "cluster", "hardware", "user", "jobs", "node_hours", "cost", "unit"])
        for r in rows:
            writer.writerow([r.month, r.project, r.cluster, r.hardware, r.user, r.jobs, r.node_hours, r.cost, r.unit])
        return response
    charts = {name: queries.totals_by(rows, name) for name in ("month", "cluster", "hardware", "user")}
    chart_data = {name: {"labels": list(data), "values": [float(v) for v in data.values()]} for name, data in charts.items()}
    return render(request, "budgets/usage.html", {"title": title, "rows": rows, "chart_data": chart_data, "unit": unit})


@login_required
def project_usage(request, slug: str):
    project = get_object_or_404(access.visible_projects(request.user), slug=slug)
    budget_row = Budget.objects.filter(project=project).first()
    response = _usage_response(
        request, Job.objects.filter(project=project), f"Usage of {project.name}", budget_row.unit if budget_row else None,
        f"usage-{project.slug}",
    )
    return response


@login_required
def site_usage(request):
    """Site admins see every project (in the reporting unit); researchers see the projects they are in."""
    jobs = Job.objects.filter(project__in=access.visible_projects(request.user))
    title = "Usage across all projects" if request.user.is_staff else "Usage of your projects"
    from portal.accounts.models import SiteSettings

    unit = SiteSettings.current().reporting_unit or settings.KAKEHASHI_REPORTING_UNIT
    return _usage_response(request, jobs, title, unit, "usage")
