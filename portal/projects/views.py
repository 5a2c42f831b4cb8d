from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, render

from portal.jobs.models import Job
from portal.projects import access, queries
from portal.projects.models import Project


@login_required
def dashboard(request):
    projects = queries.project_cards(request.user)
    jobs = Job.objects.filter(project__in=access.visible_projects(request.user)).select_related("project", "cluster", "hardware")[:10]
    return render(request, "dashboard.html", {"projects": projects, "jobs": jobs})


@login_required
def project_list(request):
    return render(request, "projects/list.html", {"projects": queries.project_cards(request.user)})


@login_required
def project_detail(request, slug: str):
    project = get_object_or_404(access.visible_projects(request.user), slug=slug)
    context = queries.project_page(request.user, project)
    return render(request, "projects/detail.html", context)


@login_required
def budget_bar(request, slug: str):
    """The budget bar alone, polled by the project page so spending shows while jobs run."""
    project = _project_or_404(request.user, slug)
    return render(request, "partials/budget_bar.html", {"budget": queries.budget_summary(project)})


def _project_or_404(user, slug: str) -> Project:
    return get_object_or_404(access.visible_projects(user), slug=slug)


@login_required
def members(request, slug: str):
    from django.contrib import messages
    from django.core.exceptions import PermissionDenied, ValidationError
    from django.shortcuts import redirect

    from portal.projects import actions
    from portal.projects.models import Membership, Role

    project = _project_or_404(request.user, slug)
    access.require(request.user, project, "view")
    if request.method == "POST":
        try:
            action = request.POST.get("action")
            if action == "add":
                added = actions.add_member(request.user, project, request.POST.get("who", "").strip(), request.POST.get("role", Role.MEMBER))
                messages.success(request, f"{added.user.username} is now {added.role} of {project.slug}.")
            else:
                membership = get_object_or_404(Membership, pk=request.POST.get("membership"), project=project)
                if action == "role":
                    actions.change_role(request.user, membership, request.POST.get("role", ""))
                    messages.success(request, f"{membership.user.username} is now {request.POST.get('role')}.")
                elif action == "remove":
                    actions.remove_member(request.user, membership)
                    messages.success(request, f"{membership.user.username} was removed.")
        except (ValidationError, PermissionDenied) as exc:
            messages.error(request, exc.messages[0] if isinstance(exc, ValidationError) else str(exc))
        return redirect("project-members", slug=project.slug)
    context = queries.project_page(request.user, project)
    context["roles"] = Role.choices
    return render(request, "projects/members.html", context)
