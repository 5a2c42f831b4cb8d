"""Who may do what in which project. Every view and API call goes through these."""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet

from portal.compiled import CompiledRead
from portal.projects.models import ROLE_PERMISSIONS, Membership, Project, Role


def visible_projects(user) -> QuerySet[Project]:
    if not getattr(user, "is_authenticated", False):
        return Project.objects.none()
    if user.is_staff:
        return Project.objects.all()
    return Project.objects.filter(memberships__user=user).distinct()


def projects_where(user, permission: str) -> QuerySet[Project]:
    """Projects in which `user`'s role grants `permission` (ROLE_PERMISSIONS); every project for site staff."""
    if not getattr(user, "is_authenticated", False):
        return Project.objects.none()
    if user.is_staff:
        return Project.objects.all()
    roles = [role for role, granted in ROLE_PERMISSIONS.items() if permission in granted]
    return Project.objects.filter(memberships__user=user, memberships__role__in=roles).distinct()


def membership(user, project: Project) -> Membership | None:
    if not getattr(user, "is_authenticated", False):
        return None
    known = getattr(project, "_memberships", None)  # read with the project in the same query (`with_membership`)
    if known is not None and user.pk in known:
        return known[user.pk]
    return Membership.objects.filter(user=user, project=project).first()


# Every API request naming a project reads this: compiled once per process (docs/decisions/0054).
_MEMBERSHIP = CompiledRead(lambda user, slug: Membership.objects.select_related("project").filter(
    user_id=user, project__slug=slug), user=int, slug=str)


def with_membership(user, slug: str) -> Project | None:
    """The project `slug` if `user` may see it (as `visible_projects`), read with the user's membership in one
    query, so the permission check after it needs none."""
    if not getattr(user, "is_authenticated", False):
        return None
    if user.is_staff:
        return Project.objects.filter(slug=slug).first()
    member = _MEMBERSHIP.first(user=user.pk, slug=slug)
    if member is None:
        return None
    project = member.project
    project._memberships = {user.pk: member}
    return project


def can(user, project: Project, permission: str) -> bool:
    if not getattr(user, "is_authenticated", False):
        return False
    if user.is_staff:
        return True
    member = membership(user, project)
    return member is not None and member.can(permission)


def require(user, project: Project, permission: str) -> None:
    if not can(user, project, permission):
        verb = {"view": "see", "submit": "submit jobs in", "manage": "manage", "manage_jobs": "manage jobs of"}
        raise PermissionDenied(
            f"You are not allowed to {verb.get(permission, permission)} project {project.slug}"
            + (" (you are not a member)." if membership(user, project) is None else " (your role does not allow it).")
        )


def role_of(user, project: Project) -> str | None:
    if getattr(user, "is_staff", False):
        return Role.OWNER
    member = membership(user, project)
    return member.role if member else None
