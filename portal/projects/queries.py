"""Read helpers for project pages."""

from __future__ import annotations

from portal.projects import access
from portal.projects.models import ROLE_PERMISSIONS, Membership, Project, Role


def membership_page(user, project: Project, *, limit: int | None = None) -> dict:
    """Who is in the project and what `user` may do in it (their role read once). With `limit`, the first
    `limit` members by name and whether there are more (`more_members`): a card, not the members page."""
    if getattr(user, "is_staff", False):
        role = Role.OWNER  # site staff may do everything everywhere (access.can, access.role_of)
    else:
        member = access.membership(user, project)
        role = member.role if member else None
    granted = ROLE_PERMISSIONS.get(role, frozenset())
    members = Membership.objects.filter(project=project).select_related("user").order_by("user__username")
    context = {
        "project": project,
        "role": role,
        "can_submit": "submit" in granted,
        "can_manage": "manage" in granted,
        "members": members,
    }
    if limit is not None:
        shown = list(members[: limit + 1])
        context.update(members=shown[:limit], more_members=len(shown) > limit)
    return context
