"""A project's members page (the project pages themselves are overview pages: portal/overview/views.py)."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.shortcuts import get_object_or_404, redirect, render

from portal.ids import id_or_zero
from portal.projects import access, actions, queries
from portal.projects.models import Membership, Project, Role

MEMBERS_PAGE = 50


def _project_or_404(user, slug: str) -> Project:
    return get_object_or_404(access.visible_projects(user), slug=slug)


@login_required
def members(request, slug: str):
    project = _project_or_404(request.user, slug)
    access.require(request.user, project, "view")
    if request.method == "POST":
        try:
            action = request.POST.get("action")
            if action == "add":
                added = actions.add_member(request.user, project, request.POST.get("who", "").strip(), request.POST.get("role", Role.MEMBER))
                messages.success(request, f"{added.user.username} is now {added.role} of {project.slug}.")
            else:
                membership = get_object_or_404(Membership, pk=id_or_zero(request.POST.get("membership")), project=project)
                if action == "role":
                    actions.change_role(request.user, membership, request.POST.get("role", ""))
                    messages.success(request, f"{membership.user.username} is now {request.POST.get('role')}.")
                elif action == "remove":
                    actions.remove_member(request.user, membership)
                    messages.success(request, f"{membership.user.username} was removed.")
        except (ValidationError, PermissionDenied) as exc:
            messages.error(request, exc.messages[0] if isinstance(exc, ValidationError) else str(exc))
        return redirect("project-members", slug=project.slug)
    context = queries.membership_page(request.user, project)
    # A course or a centre-wide project has hundreds of members: MEMBERS_PAGE a page, by name.
    context["page"] = Paginator(context["members"], MEMBERS_PAGE).get_page(request.GET.get("page"))
    context["members"] = context["page"].object_list
    context["roles"] = Role.choices
    return render(request, "projects/members.html", context)
