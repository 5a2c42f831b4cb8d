"""The Data page: files of the projects you can see, an upload form, datasets named from them, downloads. Thin:
the rules are in actions and datasets."""

from __future__ import annotations

from datetime import timedelta
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import FileResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST

from portal.catalog.queries import submittable_projects
from portal.projects import access
from portal.storage import actions, datasets, manage, objectstore, quota, uploads
from portal.storage.forms import DatasetForm, ProjectForm, UploadForm
from portal.storage.models import Dataset, FileState, Folder, UploadState
from portal.storage.queries import visible_files, visible_uploads


@login_required
def data_page(request):
    projects = submittable_projects(request.user)
    if request.method != "POST":
        return _data_page(request, projects)
    try:
        # Before request.POST is touched: a too-large body is refused without being read.
        actions.check_declared_size(request.META.get("CONTENT_LENGTH"))
    except actions.StorageError as exc:
        messages.error(request, exc.message)
        return redirect("data")
    form = UploadForm(request.POST, request.FILES, projects=projects)
    try:
        if form.is_valid():
            data = form.cleaned_data
            stored, created = actions.store_file(request.user, data["project"], data["file"], path=data["path"],
                                                 overwrite=data["overwrite"])
            messages.success(request, f"{'Uploaded' if created else 'Replaced'} {stored.path} in {stored.project.slug}.")
            return redirect(f"{request.path}?project={stored.project.slug}")
    except actions.StorageError as exc:
        form.add_error(exc.field if exc.field in form.fields else None, exc.message)
    except PermissionDenied as exc:
        form.add_error("project", str(exc))
    return _data_page(request, projects, form=form, status=400)


@login_required
@require_POST
def dataset_create(request):
    """The Data page's "Name a dataset" form: the same action as POST /api/v1/projects/<slug>/datasets/."""
    projects = submittable_projects(request.user)
    dataset_form = DatasetForm(request.POST, projects=projects)
    if dataset_form.is_valid():
        data = dataset_form.cleaned_data
        folder = data["source"] == "folder"
        try:
            dataset = datasets.create_dataset(request.user, data["project"], name=data["name"],
                                              path=None if folder else data["path"], prefix=data["path"] if folder else None)
        except actions.StorageError as exc:
            dataset_form.add_error(_DATASET_FIELDS.get(exc.field), exc.message)
        except PermissionDenied as exc:
            dataset_form.add_error("project", str(exc))
        else:
            messages.success(request, f"Named {dataset.get_kind_display().lower()} {dataset.source} in "
                                      f"{dataset.project.slug} as dataset {dataset.name}: jobs attach it by that name.")
            return redirect(f"{reverse('data')}?project={dataset.project.slug}")
    # What was typed stays in the form, beside the error.
    return _data_page(request, projects, dataset_form=dataset_form, status=400)


# The Data page's management forms: each names its action; all take a project the user may upload to.
_MANAGE = {
    "delete": lambda user, project, post: _said(manage.delete_file(user, project, post.get("path")),
                                                lambda f: f"Deleted {f.path} from {project.slug}."),
    "delete-folder": lambda user, project, post: _said(manage.delete_folder(user, project, post.get("path")),
                                                       lambda r: f"Deleted folder {post.get('path', '').rstrip('/')}/ "
                                                                 f"({r[0]} file(s), {quota.size_text(r[1])}) from "
                                                                 f"{project.slug}."),
    "move": lambda user, project, post: _said(manage.move(user, project, post.get("path"), post.get("destination")),
                                              lambda r: f"Moved {post.get('path', '').rstrip('/')} to {r[0]} in "
                                                        f"{project.slug}."),
    "mkdir": lambda user, project, post: _said(manage.make_folder(user, project, post.get("path")),
                                               lambda f: f"Made folder {f.path}/ in {project.slug}."),
    "delete-dataset": lambda user, project, post: _said(manage.delete_dataset(user, project, post.get("name", "")),
                                                        lambda d: f"Deleted dataset {d.name} of {project.slug} (its "
                                                                  "files stay)."),
    "rename-dataset": lambda user, project, post: _said(
        manage.rename_dataset(user, project, post.get("name", ""), post.get("new_name")),
        lambda d: f"Renamed dataset {post.get('name')} of {project.slug} to {d.name}: jobs now find it at "
                  f"$KAKEHASHI_DATA/{d.name}."),
}


def _said(result, message):
    return message(result)


@login_required
@require_POST
def data_manage(request):
    """Delete, move or rename files and folders, make folders, delete or rename datasets (portal/storage/manage.py)."""
    form = ProjectForm(request.POST, projects=submittable_projects(request.user))
    action = _MANAGE.get(request.POST.get("action", ""))
    back = f"{reverse('data')}?project={request.POST.get('project', '')}"
    if action is None or not form.is_valid():
        messages.error(request, "That project is not one you may change files in." if action else "Unknown action.")
        return redirect(back)
    try:
        messages.success(request, action(request.user, form.cleaned_data["project"], request.POST))
    except actions.StorageError as exc:
        messages.error(request, exc.message)
    except PermissionDenied as exc:
        messages.error(request, str(exc))
    return redirect(back)


@login_required
@require_POST
def upload_abort(request, upload_id):
    """Abort one of your unfinished uploads: the store drops its parts and the quota is free again."""
    session = get_object_or_404(visible_uploads(request.user), pk=upload_id)
    try:
        uploads.abort_upload(request.user, session)
    except actions.StorageError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"Aborted the upload of {session.path} ({quota.size_text(session.size)}): its "
                                  "space is free again.")
    return redirect(f"{reverse('data')}?project={session.project.slug}")


PAGE = 100  # files, and datasets, a page

# The action's field names, as the form calls them.
_DATASET_FIELDS = {"name": "name", "path": "path", "prefix": "path", "project": "project"}


def _data_page(request, projects, *, form: UploadForm | None = None, dataset_form: DatasetForm | None = None,
               status: int = 200):
    project_filter = request.GET.get("project") or ""
    form = form or UploadForm(projects=projects, initial={"project": project_filter or None})
    dataset_form = dataset_form or DatasetForm(projects=projects, initial={"project": project_filter or None})
    files = visible_files(request.user)
    datasets = Dataset.objects.filter(project__in=access.visible_projects(request.user)).select_related(
        "project", "stored_file", "cluster")
    # Your uploads refused after completion (their bytes were not the SHA-256 given) in the last week, with why.
    refused = visible_uploads(request.user).filter(state=UploadState.REFUSED,
                                                   ended_at__gte=timezone.now() - timedelta(days=7))
    # Your uploads not finished: they hold quota until completed or aborted (or abandoned after a day).
    unfinished = visible_uploads(request.user).filter(state=UploadState.OPEN)
    folders = Folder.objects.filter(project__in=access.visible_projects(request.user))
    # Read once for what the page derives from them (the forms' project choices read their own).
    upload_projects = list(projects)
    if project_filter:
        files = files.filter(project__slug=project_filter)
        datasets = datasets.filter(project__slug=project_filter)
        refused = refused.filter(project__slug=project_filter)
        unfinished = unfinished.filter(project__slug=project_filter)
        folders = folders.filter(project__slug=project_filter)
    return render(request, "storage/data.html", {
        "direct_upload": objectstore.configured(),
        "upload_projects": upload_projects,
        "quotas": [(p.slug, usage) for p, usage in quota.usages(upload_projects[:20])],
        "form": form,
        "dataset_form": dataset_form,
        "files_page": (files_page := Paginator(files, PAGE).get_page(request.GET.get("page"))),
        "files": (files := list(files_page)),
        # While a file is being verified the list refreshes itself, so it turns into a download link when ready.
        "verifying": any(f.state == FileState.VERIFYING for f in files),
        "datasets_page": (datasets_page := Paginator(datasets, PAGE).get_page(request.GET.get("datasets_page"))),
        "datasets": list(datasets_page),
        # The pagers keep the project filter.
        "filter_query": urlencode({"project": project_filter}) if project_filter else "",
        "refused_uploads": refused.order_by("-ended_at")[:50],
        "unfinished_uploads": unfinished.order_by("-last_activity_at")[:50],
        # Folders of the files on this page, and those made on purpose (empty ones included).
        "folders": manage.folders_of([(f.project.slug, f.path) for f in files], folders),
        "manageable": {p.slug for p in upload_projects},
        "abandon_hours": settings.KAKEHASHI_UPLOAD_ABANDON_HOURS,
        "browser_part_bytes": settings.KAKEHASHI_BROWSER_UPLOAD_PART_BYTES,
        "projects": list(access.visible_projects(request.user)),
        "project_filter": project_filter,
        "can_upload": bool(upload_projects),
        "max_upload_bytes": actions.max_upload_bytes(),
        "nav": "data",
    }, status=status)


@login_required
def download(request, pk: int):
    stored = get_object_or_404(visible_files(request.user), pk=pk)
    try:
        url = actions.download_url(request.user, stored)
    except actions.StorageError as exc:
        messages.error(request, exc.message)
        return redirect("data")
    if url is not None:  # a presigned GET: the bytes come from the object store, never through the portal
        return redirect(url)
    try:
        handle = actions.open_file(request.user, stored)
    except actions.StorageError as exc:
        messages.error(request, exc.message)
        return redirect("data")
    return FileResponse(handle, as_attachment=True, filename=stored.filename)
