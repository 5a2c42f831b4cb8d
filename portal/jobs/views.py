"""Job pages. Thin: parse the request, call portal.jobs.actions, render. No scheduler is contacted here.

Why one module: one short view per job page (list, new, preview, detail, log, cancel, sweep, outputs), each
parsing, calling portal.jobs.actions and rendering; they share the private lookups (`_job_or_404`, `_form`), and
the job's URLs map onto this one file.
"""

from __future__ import annotations

import json
import uuid
from datetime import timedelta

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import FileResponse, Http404, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme, urlencode
from django.views.decorators.clickjacking import xframe_options_sameorigin
from django.views.decorators.http import require_POST

from portal.catalog import job_templates, places
from portal.catalog import queries as catalog
from portal.ids import id_or_zero
from portal.jobs import listing, notebooks, outputs
from portal.jobs.actions.cancel import (
    CancelError,
    may_cancel,
    request_cancel,
    request_cancel_many,
    request_cancel_sweep,
)
from portal.jobs.actions.submit import edit_for_clone, prepare_job, submit_job
from portal.jobs.actions.sweeps import points_to_rerun, rerun_failed, submit_sweep
from portal.jobs.actions.validation import JobRequest, SubmitError, format_walltime
from portal.jobs.forms import PARAM_PREFIX, JobForm
from portal.jobs.models import Job, JobGroup, JobState
from portal.jobs.outputs import request_output_refresh
from portal.jobs.queries import job_for, output_download, sweep_for, sweep_totals, visible_jobs
from portal.jobs.sweep_table import parameter_text, sweep_table
from portal.projects import access
from portal.storage.actions import open_job_output
from portal.storage.models import Dataset, DatasetState
from portal.storage.pins import pinned_data
from portal.storage.queries import visible_files

# htmx stops polling when a response has this status.
STOP_POLLING = 286
COLLECT_GRACE = timedelta(seconds=15)
POINTS_PAGE = 100  # a sweep's points a page shows (a sweep may have 1,000); its totals and buttons cover them all
OUTPUTS_PAGE = 100  # a job's output files a page shows (a job may leave 10,000: KAKEHASHI_OUTPUT_MAX_FILES)


def _job_or_404(user, pk: int) -> Job:
    job = job_for(user, pk)
    if job is None:
        raise Http404("No such job in your projects")
    return job


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
        "here": request.get_full_path(), "page_sizes": listing.PAGE_SIZES,
    })


@login_required
@require_POST
def job_bulk_cancel(request):
    """Cancel the ticked jobs the user may cancel; the others are named, nothing else happens to them."""
    ids = [int(v) for v in request.POST.getlist("job") if v.isdigit()][:listing.PAGE_SIZES[-1]]
    result = request_cancel_many(request.user, ids, visible_jobs(request.user))
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


def _form(request, data=None, initial=None, files=None) -> JobForm:
    projects = catalog.submittable_projects(request.user)
    # Asked once: the choices, the project -> hardware map below and the preview's comparison all read it.
    by_project = catalog.hardware_by_project(projects)
    form = JobForm(
        data,
        files,
        initial=initial or {},
        projects=projects,
        hardware=catalog.hardware_of(by_project),
        software=catalog.software_for_projects(projects),
        stored_notebooks=visible_files(request.user).filter(project__in=projects, path__endswith=".ipynb"),
        user=request.user,
        datasets=Dataset.objects.filter(project__in=projects, state=DatasetState.READY).select_related(
            "project", "stored_file", "cluster"),
    )
    # Which projects may use each hardware type (their ids, space-separated): the form offers only the chosen
    # project's, and a choice made for another project is dropped when the project changes.
    users: dict[int, list[str]] = {}
    for project_id, hardware in sorted(by_project.items())[:MAX_FORM_PROJECTS]:
        for pk in hardware:
            users.setdefault(pk, []).append(str(project_id))
    form.hardware_projects = {pk: " ".join(ids) for pk, ids in users.items()}
    form.hardware_by_project = by_project
    return form


MAX_FORM_PROJECTS = 50  # a person in more projects than this gets every hardware type offered (and checked at Run)


def _request_from(form: JobForm, user) -> JobRequest:
    data = form.cleaned_data
    chosen = list(data.get("datasets") or [])
    if any(d.project_id != data["project"].pk for d in chosen):
        raise SubmitError("choose datasets of the job's own project", field="datasets")
    return JobRequest.from_data(data, uuid=data.get("draft"), datasets=[d.name for d in chosen])


def _notebook_context(form: JobForm) -> dict:
    """The notebook's parameters cell and an input per parameter, holding what was typed or else its default."""
    nb = form.cleaned_data.get("notebook") if hasattr(form, "cleaned_data") else None
    if nb is None and form.initial.get("notebook_json"):
        nb = json.loads(form.initial["notebook_json"])
    if nb is None:
        return {"notebook": None}
    typed = {k[len(PARAM_PREFIX):]: v for k, v in form.data.items() if k.startswith(PARAM_PREFIX)}
    inputs = notebooks.parameter_inputs(nb, typed, form.initial.get("parameters") or {})
    return {"notebook": nb, "notebook_kernel": notebooks.kernel_of(nb), "parameters_source": notebooks.parameters_source(nb),
            "notebook_params": [{**vars(i), "input": PARAM_PREFIX + i.name} for i in inputs]}


def _initial(request) -> tuple[dict, list[str]]:
    """What the form starts with (a project, a clone, a template, hardware) and the notices that explain what
    could not be carried over."""
    initial: dict = {}
    notices: list[str] = []
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
                script=source.script if source.notebook is None else "",
                env="\n".join(f"{k}={v}" for k, v in (source.env or {}).items()),
                template=source.template,
                working_directory=source.working_directory,
                procs_per_node=source.procs_per_node,
                datasets=list(source.datasets.all()),
            )
            if source.notebook is not None:
                initial.update(notebook_json=json.dumps(source.notebook), parameters=source.parameters or {})
            initial["draft"] = uuid.uuid4()
            if (edit := edit_for_clone(source, initial["draft"])) is not None:
                # The clone is the same job: its script's advanced edit too, under the clone's own names.
                initial["edited_script"] = edit
                notices.append("The job's script was edited (Advanced): the clone carries the edit. If you change "
                               "the form, the preview says whether the edit still fits.")
            if source.hardware is not None:
                why = catalog.why_not_usable(source.hardware, source.project)
                if why:
                    initial["hardware"] = None
                    notices.append(f"Hardware is empty: {why}. Choose other hardware.")
            if source.software is not None and not catalog.software_for_projects([source.project]).filter(
                    pk=source.software.pk, clusters=source.cluster).exists():
                initial["software"] = None
                notices.append(f"Software is empty: {source.software.name} is no longer offered to project "
                               f"{source.project.slug} on {source.cluster.name}. Choose other software.")
    if template := job_templates.get(request.GET.get("template", "")):
        initial.update(template=template.slug, script=template.script, launcher=template.launcher,
                       name=initial.get("name") or template.slug)
    if hw := request.GET.get("hardware"):
        initial["hardware"] = catalog.hardware_for_projects(catalog.submittable_projects(request.user)).filter(slug=hw).first()
    template = job_templates.get(initial.get("template", ""))
    chosen = initial.get("hardware")
    project = initial.get("project") or catalog.submittable_projects(request.user).first()
    if template is not None and template.requires and chosen is not None and project is not None:
        fitting = catalog.software_providing(template.requires, chosen.cluster, project)
        if initial.get("software") not in fitting and fitting:
            initial["software"] = fitting[0]
    return initial, notices


@login_required
def job_new(request):
    notices: list[str] = []
    if request.method == "POST":
        form = _form(request, request.POST, files=request.FILES)
        if form.is_valid():
            try:
                job_request = _request_from(form, request.user)
                if form.cleaned_data.get("sweep"):
                    sweep = submit_sweep(request.user, job_request, form.cleaned_data["sweep"])
                    how = " as one scheduler array" if sweep.array else ""
                    # Flash messages say what the researcher did, never a state: they stay on the page while the
                    # live status below moves on, and "is queued" beside a Completed badge would be false.
                    messages.success(request, f"You submitted sweep {sweep.group.name}: {len(sweep.submissions)} jobs{how}. "
                                              "Their states below follow the scheduler live.")
                    return redirect("job-group", pk=sweep.group.pk)
                submission = submit_job(request.user, job_request)
            except SubmitError as exc:
                form.add_error(exc.field if exc.field in form.fields else None, exc.message)
            except PermissionDenied as exc:
                form.add_error("project", str(exc))
            else:
                for warning in submission.warnings:
                    messages.warning(request, warning)
                if submission.created:
                    messages.success(request, f"You submitted job {submission.job.name} to {submission.job.cluster.name}. "
                                              "Its state below follows the scheduler live.")
                return redirect("job-detail", pk=submission.job.pk)
    else:
        initial, notices = _initial(request)
        form = _form(request, initial=initial)
        if not form.fields["project"].queryset.exists():
            # A viewer (of every project they are in) may look but not submit: no form that can only fail.
            return render(request, "jobs/new_not_allowed.html", {"viewing": access.visible_projects(request.user)})
        wanted = request.GET.get("project", "")
        if wanted and initial.get("project") is not None and not form.fields["project"].queryset.filter(
                pk=initial["project"].pk).exists():
            notices.append(f"You may not submit jobs in {initial['project'].name}: you are a viewer there. "
                           "Choose one of your other projects, or ask its owners for the member role.")
    context = {"form": form, "notices": notices, **catalog.picker_context(request.user, form), **_notebook_context(form),
               "template_limits": catalog.host_template_limits(form.fields["hardware"].queryset)}
    return render(request, "jobs/new.html", context)


@login_required
@require_POST
def job_notebook(request):
    """The chosen notebook's parameters cell, with an input per parameter (or why the notebook cannot be used)."""
    form = _form(request, request.POST, files=request.FILES)
    form.is_valid()  # only the notebook matters here: the rest of the form may still be half filled
    errors = [e for f in ("notebook_file", "stored_notebook") for e in form.errors.get(f, [])]
    return render(request, "jobs/_notebook.html", {"form": form, "notebook_errors": errors, **_notebook_context(form)})


@login_required
@require_POST
def job_preview(request):
    """The exact script and the estimate for what the form says now (rendered here: pure, no scheduler)."""
    form = _form(request, request.POST, files=request.FILES)
    context: dict = {"form": form}
    if form.is_valid():
        try:
            job_request = _request_from(form, request.user)
            if form.cleaned_data.get("sweep"):
                sweep = submit_sweep(request.user, job_request, form.cleaned_data["sweep"], dry_run=True)
                prepared = sweep.submissions[0]
                context["sweep_count"] = len(sweep.submissions)
                context["sweep_array"] = sweep.array
                prepared.estimate = sweep.estimate
            else:
                prepared = prepare_job(request.user, job_request, require_account=False)
        except SubmitError as exc:
            context["error"] = exc.message
            context["error_field"] = exc.field
        except PermissionDenied as exc:
            context["error"] = str(exc)
        else:
            context.update(script=prepared.script, estimate=prepared.estimate, job=prepared.job, warnings=prepared.warnings)
            edit = (form.cleaned_data.get("edited_script") or "").replace("\r\n", "\n").strip()
            context["edited"] = bool(edit) and edit == prepared.script.strip()
            context["budget"] = catalog.budget_after(prepared.job.project, prepared.estimate)
            # A sweep's points share one shape: the comparison is for one point (the estimate above is for all).
            context["comparison"] = _comparison(prepared.job, request.user, form)
    return render(request, "jobs/_preview.html", context)


def _comparison(job, user, form: JobForm) -> dict:
    """Every place this job's shape could run for its project, cheapest first (docs/decisions/0018)."""
    hw = job.hardware
    shape = places.Shape(gpus=hw.gpus_per_node * job.nodes, walltime_seconds=job.walltime_seconds,
                         gpu_model=hw.gpu_model, nodes=job.nodes)
    usable = form.hardware_by_project.get(job.project_id, set())
    hardware = [h for h in form.fields["hardware"].queryset if h.pk in usable]
    return {"shape": shape, "places": places.places_for(job.project, shape, user, hardware=hardware), "chosen": hw}


@login_required
def job_detail(request, pk: int):
    job = _job_or_404(request.user, pk)
    if request.htmx and request.GET.get("part") == "outputs":
        # The final fetch marks the logs complete, then collects outputs/: stop once that had time to happen,
        # or a page polling in between would never show the files (a notebook job's executed notebook). Decided
        # before the part is rendered: decided after, a collection committing in between stopped the polling with a
        # part rendered without its files, and the page said "No files" for good (seen under load in a full run).
        collected = job.outputs.filter(complete=True, fetched_at__lt=timezone.now() - COLLECT_GRACE).exists()
        stop = job.is_final and (job.artifacts.exists() or job.outputs_not_collected or collected)
        response = render(request, "jobs/_outputs.html", _outputs_context(request, job))
        if stop:
            response.status_code = STOP_POLLING
        return response
    return render(request, "jobs/detail.html", {**_detail_context(request, job), **_outputs_context(request, job),
                                                **pinned_data(job)})


def _outputs_context(request, job: Job) -> dict:
    """The job and a page of its output files (`?outputs_page=`)."""
    page = Paginator(job.artifacts.all(), OUTPUTS_PAGE).get_page(request.GET.get("outputs_page"))
    return {"job": job, "outputs_page": page}


def _detail_context(request, job: Job) -> dict:
    return {
        "job": job,
        "events": job.events.select_related("actor"),
        "can_cancel": job.can_cancel and may_cancel(request.user, job),
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
        request_cancel(job, request.user)
    except CancelError as exc:
        messages.info(request, str(exc))
    except PermissionDenied as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"You asked to cancel job {job.name}. Its state below follows the scheduler live.")
    return redirect("job-detail", pk=job.pk)


@login_required
@require_POST
def job_group_cancel(request, pk: int):
    group = _group_or_404(request.user, pk)
    try:
        cancelled = request_cancel_sweep(group, request.user)
    except PermissionDenied as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"You asked to cancel {len(cancelled)} job(s) of sweep {group.name}.")
    return redirect("job-group", pk=group.pk)


def _group_or_404(user, pk: int) -> JobGroup:
    group = sweep_for(user, pk)
    if group is None:
        raise Http404("No such sweep in your projects")
    return group


@login_required
def job_group(request, pk: int):
    """A sweep's page: POINTS_PAGE points a page (as the other pages page their rows), beside the whole sweep's
    totals, counts and buttons; htmx refreshes the page shown until every job of the sweep has ended."""
    group = _group_or_404(request.user, pk)
    jobs = visible_jobs(request.user).filter(group=group)
    totals = sweep_totals(jobs)
    page = Paginator(jobs.order_by("array_index", "pk").prefetch_related("artifacts"), POINTS_PAGE).get_page(
        request.GET.get("page"))
    points = list(page.object_list)
    for job in points:  # a notebook sweep's points are compared beside their executed notebooks
        job.executed_notebook = next((a for a in job.artifacts.all() if a.path == notebooks.EXECUTED_NOTEBOOK
                                      and a.stored_name), None)
    template = "jobs/_group_table.html" if request.htmx else "jobs/group.html"
    response = render(request, template, {
        "group": group, "page": page, "totals": totals, "table": sweep_table(points, totals),
        "sweep_values": [(name, ", ".join(parameter_text(v) for v in values)) for name, values in (group.sweep or {}).items()],
        # Only a sweep with a failed or timed-out job can have points to re-run: the others skip reading them.
        "rerunnable": len(points_to_rerun(group)) if totals.failed else 0,
        "notebook_sweep": any(job.kind == Job.Kind.NOTEBOOK for job in points),
    })
    if request.htmx and not totals.active:
        response.status_code = STOP_POLLING
    return response


@login_required
@require_POST
def job_group_rerun(request, pk: int):
    """"Re-run failed points": a new job in the sweep for each point whose latest attempt failed or timed out."""
    group = _group_or_404(request.user, pk)
    try:
        jobs = rerun_failed(group, request.user)
    except SubmitError as exc:
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
    download = output_download(_job_or_404(request.user, pk), artifact_id)
    if download is None:
        raise Http404("no such output of this job in the portal: a file too large to copy stays in the job "
                      "directory on the cluster")
    if download.url is not None:  # from the object store itself: the portal never streams large outputs
        return redirect(download.url)
    return FileResponse(download.open(), as_attachment=True, filename=download.filename)


@login_required
@xframe_options_sameorigin
def job_executed_notebook(request, pk: int):
    """The executed notebook as HTML, for the job page's sandboxed frame (or a tab of its own).

    A notebook's outputs may hold any HTML or script: the response's CSP makes it a sandbox (an opaque origin,
    no script, nothing fetched from anywhere), so it cannot act as the portal or read its pages."""
    job = _job_or_404(request.user, pk)
    artifact = job.artifacts.filter(path=notebooks.EXECUTED_NOTEBOOK).exclude(stored_name="").first()
    if artifact is None:
        raise Http404("this job has no executed notebook (yet)")
    limit = settings.KAKEHASHI_MAX_NOTEBOOK_BYTES * 4  # outputs (plots) make an executed notebook grow
    if artifact.size > limit:
        html = notebooks.not_shown(f"The executed notebook is {artifact.size // 2**20} MiB, too large to show here: "
                                   "download notebook.ipynb from the job page.")
    else:
        with open_job_output(artifact.stored_name) as f:
            html = notebooks.to_html(f.read(limit + 1))
    response = HttpResponse(html, content_type="text/html; charset=utf-8")
    response["Content-Security-Policy"] = notebooks.SANDBOX_POLICY
    return response


@login_required
def job_presets(request):
    """The quick choices for the project now selected in the form."""
    project = catalog.submittable_projects(request.user).filter(pk=id_or_zero(request.GET.get("project"))).first()
    return render(request, "jobs/_presets.html", {"presets": catalog.presets_for(project, request.user)})
