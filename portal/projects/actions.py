"""Membership changes: each one checked, done in a transaction, and written to the audit log."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.db.models import Q

from portal.audit.actions import record
from portal.projects import access
from portal.projects.models import Membership, Project, Role


def _check_can_grant(actor, project: Project, role: str) -> None:
    access.require(actor, project, "manage")
    if role == Role.OWNER and access.role_of(actor, project) != Role.OWNER:
        raise PermissionDenied("only an owner can make someone an owner")


def _owners_left(project: Project, excluding: Membership) -> int:
    return Membership.objects.filter(project=project, role=Role.OWNER).exclude(pk=excluding.pk).count()


@transaction.atomic
def add_member(actor, project: Project, who: str, role: str) -> Membership:
    if role not in Role.values:
        raise ValidationError(f"unknown role {role!r}")
    _check_can_grant(actor, project, role)
    User = get_user_model()
    user = User.objects.filter(Q(username__iexact=who) | Q(email__iexact=who)).first()
    if user is None:
        raise ValidationError(f"no user {who!r}: they must log in to Kakehashi once before they can be added")
    if Membership.objects.filter(project=project, user=user).exists():
        raise ValidationError(f"{user.username} is already a member; change their role instead")
    membership = Membership.objects.create(project=project, user=user, role=role)
    record("membership.add", actor=actor, project=project, target=membership, user=user.username, role=role)
    return membership


@transaction.atomic
def change_role(actor, membership: Membership, role: str) -> Membership:
    if role not in Role.values:
        raise ValidationError(f"unknown role {role!r}")
    membership = Membership.objects.select_for_update().get(pk=membership.pk)
    _check_can_grant(actor, membership.project, role)
    if membership.role == Role.OWNER:
        _check_can_grant(actor, membership.project, Role.OWNER)
        if role != Role.OWNER and _owners_left(membership.project, membership) == 0:
            raise ValidationError("a project needs at least one owner")
    before = membership.role
    membership.role = role
    membership.save(update_fields=["role"])
    record("membership.role", actor=actor, project=membership.project, target=membership, before=before, after=role)
    return membership


@transaction.atomic
def remove_member(actor, membership: Membership) -> None:
    membership = Membership.objects.select_for_update().get(pk=membership.pk)
    access.require(actor, membership.project, "manage")
    if membership.role == Role.OWNER:
        _check_can_grant(actor, membership.project, Role.OWNER)
        if _owners_left(membership.project, membership) == 0:
            raise ValidationError("a project needs at least one owner")
    record("membership.remove", actor=actor, project=membership.project, target=membership, user=membership.user.username)
    membership.delete()
