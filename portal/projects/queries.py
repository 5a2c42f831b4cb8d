"""Read helpers for project pages."""

from __future__ import annotations

from portal.projects import access
from portal.projects.models import Membership, Project


def membership_page(user, project: Project) -> dict:
    """Who is in the project and what `user` may do in it."""
    return {
        "project": project,
        "role": access.role_of(user, project),
        "can_submit": access.can(user, project, "submit"),
        "can_manage": access.can(user, project, "manage"),
        "members": Membership.objects.filter(project=project).select_related("user").order_by("user__username"),
    }
