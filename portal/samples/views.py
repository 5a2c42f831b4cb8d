"""The job page's GPU section (an htmx fragment under the job's page, so portal/jobs never imports this app) and
the owner's Keep running. Thin: the figures come from portal/samples/queries.py, the keep from actions.py."""

from __future__ import annotations

import csv
import json

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from portal.jobs.actions.cancel import may_cancel
from portal.jobs.queries import visible_jobs
from portal.projects import access
from portal.samples import queries
from portal.samples.actions import KeepRefused, RuleRefused, keep, set_rule
from portal.samples.efficiency import efficiency_rows, totals
from portal.samples.forms import IdleRuleForm
from portal.samples.policy import describe, rule_for_project


@login_required
def job_gpu(request, pk: int):
    job = get_object_or_404(visible_jobs(request.user).select_related("project", "hardware", "user"), pk=pk)
    gpu = queries.job_gpu(job)
    return render(request, "samples/_job_gpu.html", {
        # The chart's data in an attribute of its canvas: htmx drops <script> elements it swaps in (the CSP).
        "job": job, "gpu": gpu, "chart_json": json.dumps(gpu["chart"]), "is_owner": job.user_id == request.user.pk,
        "can_cancel": job.can_cancel and may_cancel(request.user, job)})


@login_required
@require_POST
def job_keep(request, pk: int):
    job = get_object_or_404(visible_jobs(request.user).select_related("project", "user"), pk=pk)
    try:
        hours = float(request.POST.get("hours", ""))
    except ValueError:
        hours = 0.0
    try:
        samples = keep(job, request.user, hours)
    except (KeepRefused, PermissionDenied) as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Kept running until {samples.keep_until:%Y-%m-%d %H:%M} UTC: no idle warning or "
                                  "cancel until then. The project's admins see this keep.")
    return redirect("job-detail", pk=job.pk)


@login_required
def project_idle_rule(request, slug: str):
    """The project's idle-GPU rule: its owners and admins set it within the site's bounds."""
    project = get_object_or_404(access.visible_projects(request.user), slug=slug)
    access.require(request.user, project, "manage")
    current = rule_for_project(project)
    if request.method == "POST":
        form = IdleRuleForm(request.POST)
        if form.is_valid():
            try:
                set_rule(project, request.user, **form.as_rule_fields())
            except RuleRefused as exc:
                for problem in exc.problems:
                    form.add_error(None, problem)
            else:
                messages.success(request, f"The idle-GPU rule of {project.slug} is saved.")
                return redirect("project-idle-rule", slug=project.slug)
    else:
        form = IdleRuleForm(initial=IdleRuleForm.initial_of(current))
    return render(request, "samples/idle_rule.html", {"project": project, "form": form, "rule": describe(current)})


@login_required
def project_gpu_efficiency(request, slug: str):
    project = get_object_or_404(access.visible_projects(request.user), slug=slug)
    return _efficiency(request, [project.pk], f"GPU efficiency of {project.name}", f"gpu-efficiency-{project.slug}")


@login_required
def site_gpu_efficiency(request):
    """Site admins see every project; researchers the projects they are in (as the usage page)."""
    project_ids = list(access.visible_projects(request.user).values_list("pk", flat=True))
    title = "GPU efficiency across all projects" if request.user.is_staff else "GPU efficiency of your projects"
    return _efficiency(request, project_ids, title, "gpu-efficiency")


def _efficiency(request, project_ids: list[int], title: str, filename: str):
    rows = efficiency_rows(project_ids)
    if request.GET.get("format") == "csv":
        response = HttpResponse(content_type="text/csv")
        response["Content-Disposition"] = f'attachment; filename="{filename}.csv"'
        writer = csv.writer(response)
        writer.writerow(["project", "user", "hardware", "jobs", "gpu_hours_reserved", "gpu_hours_used",
                         "gpu_hours_idle", "efficiency", "idle_cost", "unit"])
        for r in rows:
            writer.writerow([r.project, r.user, r.hardware, r.jobs, f"{r.reserved:.4f}", f"{r.used:.4f}",
                             f"{r.idle:.4f}", "" if r.efficiency is None else f"{r.efficiency:.4f}",
                             f"{r.idle_cost:.4f}", r.unit])
        return response
    return render(request, "samples/efficiency.html", {
        "title": title, "rows": rows, "by_project": totals(rows, "project"), "by_user": totals(rows, "user"),
        "by_hardware": totals(rows, "hardware")})
