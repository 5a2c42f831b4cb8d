"""Job pages. Thin: parse the request, call portal.jobs.actions, render. No scheduler is contacted here."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import FileResponse, Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.http import url_has_allowed_host_and_scheme, urlencode
from django.views.decorators.http import require_POST

from portal.catalog import job_templates, places
from portal.catalog import queries as catalog
from portal.jobs import actions, listing, outputs
from portal.jobs.actions import format_walltime
from portal.jobs.forms import JobForm
from portal.jobs.models import Job, JobGroup, JobState
from portal.jobs.outputs import request_output_refresh
from portal.jobs.queries import visible_jobs
from portal.jobs.sweep_table import parameter_text, sweep_table
from portal.projects import access
from portal.storage.actions import open_job_output

# htmx stops polling when a response has this status.
STOP_POLLING = 286


def _job_or_404(user, pk: int) -> Job:
    return get_object_or_404(visible_jobs(user), pk=pk)


@login_required
def job_list(request):
    """Filters, search and keyset pages (portal/jobs/listing.py); never a count or an offset over all jobs."""
    filters = listing.JobFilter.from_query(request.GET)
    after = request.GET.get("after", "")
    page = listing.job_page(request.user, filters, after=int(after) if after.isdigit() else None,
                            size=listing.page_size(request.GET.get("size")))
    projects, clusters = listing.filter_choices(request.user)
    return render(request, "jobs/list.html", {
        "page": page, "filters": filters, "states": JobState.choices, "projects": projects, "clusters": clusters,
        "next_query": urlencode(filters.query(after=page.next_after, size=page.size)) if page.next_after else "",
        "first_query": urlencode(filters.query(size=page.size)) if after else "",
        "here": request.get_full_path(),
    })


@login_required
@require_POST
def job_bulk_cancel(request):
    """Cancel the ticked jobs the user may cancel; the others are named, nothing else happens to them."""
    ids = [int(v) for v in request.POST.getlist("job") if v.isdigit()][:listing.PAGE_SIZES[-1]]
    result = actions.request_cancel_many(request.user, ids, visible_jobs(request.user))
    if result.cancelled:
        messages.success(request, f"Cancelling {len(result.cancelled)} job(s): "
                                  + ", ".join(job.name for job in result.cancelled) + ".")
    if result.refused:
        messages.error(request, "Not cancelled (only the job's owner or a project admin may): "
                                + ", ".join(job.name for job in result.refused) + ".")
    if result.ended:
        messages.info(request, "Already ended: " + ", ".join(job.name for job in result.ended) + ".")
    if not ids:
        messages.info(request, "Tick the jobs to cancel first.")
    back = request.POST.get("next", "")
    return redirect(back if back.startswith("/jobs/") and url_has_allowed_host_and_scheme(back, None) else "job-list")


def _form(request, data=None, initial=None) -> JobForm:
    projects = catalog.submittable_projects(request.user)
    return JobForm(
        data,
        initial=initial or {},
        projects=projects,
        hardware=catalog.hardware_for_projects(projects),
        software=catalog.software_for_projects(projects),
    )


def _request_from(form: JobForm, user) -> actions.JobRequest:
    data = form.cleaned_data
    return actions.JobRequest(
        project=data["project"],
        name=data["name"],
        script=data["script"],
        hardware=data["hardware"],
        software=data.get("software"),
        nodes=data["nodes"],
        walltime=data["walltime"],
        launcher=data["launcher"],
        procs_per_node=data.get("procs_per_node") or 0,
        template=data.get("template") or "",
        working_directory=data.get("working_directory") or "",
        env=data.get("env") or {},
        edited_script=data.get("edited_script") or None,
        uuid=data.get("draft"),
    )


def _initial(request) -> dict:
    initial: dict = {}
    if slug := request.GET.get("project"):
        initial["project"] = access.visible_projects(request.user).filter(slug=slug).first()
    if clone_id := request.GET.get("clone"):
        source = visible_jobs(request.user).filter(pk=clone_id).first()
        if source is not None:
            initial.update(
                project=source.project,
                name=source.name,
                hardware=source.hardware,
                software=source.software,
                nodes=source.nodes,
                walltime=format_walltime(source.walltime_seconds),
                launcher=source.launcher,
                script=source.script,
                env="\n".join(f"{k}={v}" for k, v in (source.env or {}).items()),
                template=source.template,
                working_directory=source.working_directory,
                procs_per_node=source.procs_per_node,
            )
    if template := job_templates.get(request.GET.get("template", "")):
        initial.update(template=template.slug, script=template.script, launcher=template.launcher,
                       name=initial.get("name") or template.slug)
    if hw := request.GET.get("hardware"):
        initial["hardware"] = catalog.hardware_for_projects(catalog.submittable_projects(request.user)).filter(slug=hw).first()
    return initial


@login_required
def job_new(request):
    if request.method == "POST":
        form = _form(request, request.POST)
        if form.is_valid():
            try:
                job_request = _request_from(form, request.user)
                if form.cleaned_data.get("sweep"):
                    sweep = actions.submit_sweep(request.user, job_request, form.cleaned_data["sweep"])
                    how = " as one scheduler array" if sweep.array else ""
                    messages.success(request, f"{len(sweep.submissions)} jobs of sweep {sweep.group.name} are queued{how}.")
                    return redirect("job-group", pk=sweep.group.pk)
                submission = actions.submit_job(request.user, job_request)
            except actions.SubmitError as exc:
                form.add_error(exc.field if exc.field in form.fields else None, exc.message)
            except PermissionDenied as exc:
                form.add_error("project", str(exc))
            else:
                for warning in submission.warnings:
                    messages.warning(request, warning)
                if submission.created:
                    messages.success(request, f"Job {submission.job.name} is queued.")
                return redirect("job-detail", pk=submission.job.pk)
    else:
        form = _form(request, initial=_initial(request))
    context = {"form": form, **catalog.picker_context(request.user, form)}
    return render(request, "jobs/new.html", context)


@login_required
@require_POST
def job_preview(request):
    """The exact script and the estimate for what the form says now (rendered here: pure, no scheduler)."""
    form = _form(request, request.POST)
    context: dict = {"form": form}
    if form.is_valid():
        try:
            job_request = _request_from(form, request.user)
            if form.cleaned_data.get("sweep"):
                sweep = actions.submit_sweep(request.user, job_request, form.cleaned_data["sweep"], dry_run=True)
                prepared = sweep.submissions[0]
                context["sweep_count"] = len(sweep.submissions)
                context["sweep_array"] = sweep.array
                prepared.estimate = sweep.estimate
            else:
                prepared = actions.prepare_job(request.user, job_request, require_account=False)
        except actions.SubmitError as exc:
            context["error"] = exc.message
            context["error_field"] = exc.field
        except PermissionDenied as exc:
            context["error"] = str(exc)
        else:
            context.update(script=prepared.script, estimate=prepared.estimate, job=prepared.job, warnings=prepared.warnings)
            context["budget"] = catalog.budget_after(prepared.job.project, prepared.estimate)
            if not form.cleaned_data.get("sweep"):
                context["comparison"] = _comparison(prepared.job)
    return render(request, "jobs/_preview.html", context)


def _comparison(job) -> dict:
    """Every place this job's shape could run for its project, cheapest first (docs/decisions/0018)."""
    hw = job.hardware
    shape = places.Shape(gpus=hw.gpus_per_node * job.nodes, walltime_seconds=job.walltime_seconds,
                         gpu_model=hw.gpu_model, nodes=job.nodes)
    return {"shape": shape, "places": places.places_for(job.project, shape), "chosen": hw}


@login_required
def job_detail(request, pk: int):
    job = _job_or_404(request.user, pk)
    if request.htmx and request.GET.get("part") == "outputs":
        response = render(request, "jobs/_outputs.html", {"job": job})
        if job.is_final and (job.artifacts.exists() or job.outputs.filter(complete=True).exists()):
            response.status_code = STOP_POLLING
        return response
    return render(request, "jobs/detail.html", _detail_context(request, job))


def _detail_context(request, job: Job) -> dict:
    return {
        "job": job,
        "events": job.events.select_related("actor"),
        "can_cancel": job.can_cancel and actions.may_cancel(request.user, job),
        "walltime": format_walltime(job.walltime_seconds),
    }


@login_required
def job_status(request, pk: int):
    job = _job_or_404(request.user, pk)
    response = render(request, "jobs/_status.html", _detail_context(request, job))
    if job.is_final:
        response.status_code = STOP_POLLING if request.htmx else 200
    return response


@login_required
def job_log(request, pk: int, stream: str):
    job = _job_or_404(request.user, pk)
    if stream not in ("stdout", "stderr"):
        return HttpResponse(status=404)
    data, truncated, complete = outputs.output_of(job, stream)
    if not complete:
        request_output_refresh(job)
    response = render(
        request,
        "jobs/_log.html",
        {"job": job, "stream": stream, "text": data.decode("utf-8", "replace"), "truncated": truncated, "complete": complete},
    )
    if complete and request.htmx:
        response.status_code = STOP_POLLING
    return response


@login_required
@require_POST
def job_cancel(request, pk: int):
    job = _job_or_404(request.user, pk)
    try:
        actions.request_cancel(job, request.user)
    except actions.CancelError as exc:
        messages.info(request, str(exc))
    except PermissionDenied as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Cancelling job {job.name}.")
    return redirect("job-detail", pk=job.pk)


@login_required
@require_POST
def job_group_cancel(request, pk: int):
    group = get_object_or_404(JobGroup.objects.filter(project__in=access.visible_projects(request.user)), pk=pk)
    try:
        cancelled = actions.request_cancel_sweep(group, request.user)
    except PermissionDenied as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Cancelling {len(cancelled)} job(s) of sweep {group.name}.")
    return redirect("job-group", pk=group.pk)


def _group_or_404(user, pk: int) -> JobGroup:
    return get_object_or_404(JobGroup.objects.filter(project__in=access.visible_projects(user)), pk=pk)


@login_required
def job_group(request, pk: int):
    group = _group_or_404(request.user, pk)
    jobs = list(visible_jobs(request.user).filter(group=group).order_by("array_index", "pk"))
    states = [job.state for job in jobs]
    counts = {label: states.count(value) for value, label in JobState.choices if value in states}
    template = "jobs/_group_table.html" if request.htmx else "jobs/group.html"
    active = sum(1 for job in jobs if not job.is_final)
    response = render(request, template, {
        "group": group, "jobs": jobs, "active": active, "counts": counts, "table": sweep_table(jobs),
        "sweep_values": [(name, ", ".join(parameter_text(v) for v in values)) for name, values in (group.sweep or {}).items()],
        "rerunnable": len(actions.points_to_rerun(group)),
    })
    if request.htmx and all(job.is_final for job in jobs):
        response.status_code = STOP_POLLING
    return response


@login_required
@require_POST
def job_group_rerun(request, pk: int):
    """"Re-run failed points": a new job in the sweep for each point whose latest attempt failed or timed out."""
    group = _group_or_404(request.user, pk)
    try:
        jobs = actions.rerun_failed(group, request.user)
    except actions.SubmitError as exc:
        messages.error(request, exc.message)
    except PermissionDenied as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Re-running {len(jobs)} point(s) of sweep {group.name}: "
                                  + ", ".join(job.name for job in jobs) + ".")
    return redirect("job-group", pk=group.pk)


@login_required
def job_artifact(request, pk: int, artifact_id: int):
    """Download a copied output file of a job you can see."""
    job = _job_or_404(request.user, pk)
    artifact = get_object_or_404(job.artifacts, pk=artifact_id)
    if not artifact.stored_name:
        raise Http404("this output was too large to copy; it is in the job directory on the cluster")
    return FileResponse(open_job_output(artifact.stored_name), as_attachment=True,
                        filename=artifact.path.rsplit("/", 1)[-1])


@login_required
def job_presets(request):
    """The quick choices for the project now selected in the form."""
    project = catalog.submittable_projects(request.user).filter(pk=request.GET.get("project") or 0).first()
    return render(request, "jobs/_presets.html", {"presets": catalog.presets_for(project)})
