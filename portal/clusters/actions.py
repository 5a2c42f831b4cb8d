"""Identities on clusters: a key pair per researcher and cluster, generated here, checked by a worker."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone
from django.views.decorators.debug import sensitive_variables

from backends.base import BackendError, TransportError
from portal.audit.actions import record
from portal.clusters.connect import NoClusterAccount, backend_for
from portal.clusters.models import Allocation, Cluster, ClusterAccount
from portal.enqueue import VERIFY_ACCOUNT, enqueue_on_commit
from portal.projects import access


@sensitive_variables("key", "private")
def generate_key_pair(comment: str) -> tuple[str, str]:
    """(private key in OpenSSH format, public key line) for a new ed25519 key."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
    ).decode()
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()
    return private, f"{public} {comment}"


@transaction.atomic
@sensitive_variables("private")
def link_account(cluster: Cluster, *, username: str, user=None, project=None, actor=None) -> ClusterAccount:
    """Create (or re-key) the account `username` on `cluster` for a user or a project's service account."""
    private, public = generate_key_pair(
        f"kakehashi:{user.username if user else 'project-' + project.slug}@{cluster.slug}"
    )
    lookup = {"cluster": cluster, "user": user} if user is not None else {"cluster": cluster, "project": project}
    account = ClusterAccount.objects.select_for_update().filter(**lookup).first() or ClusterAccount(**lookup)
    account.username = username
    account.public_key = public
    account.set_private_key(private)
    account.verified_at = None
    account.last_error = ""
    account.full_clean()
    account.save()
    record("cluster_account.link", actor=actor, project=project, target=account, cluster=cluster.slug, username=username)
    return account


OPERATIONS_PROJECT = "site-ops"


class NotOperations(Exception):
    """The project named for the site's operations is a research project."""


@transaction.atomic
def set_up_operations(cluster: Cluster, *, project_slug: str = OPERATIONS_PROJECT, group: str = "") -> Allocation:
    """The site's operations project (created if missing) and its allocation on `cluster` (charged to `group`):
    all a cluster reached without an account (the portal host, a cloud API) needs for site staff's health checks.
    The allocation's receivers audit the grant (portal/audit/signals.py)."""
    from portal.projects.models import Project

    project, _ = Project.objects.get_or_create(
        slug=project_slug, defaults={"name": "Site operations", "operations": True,
                                     "description": "Health checks and other jobs the site's staff run."})
    if not project.operations:
        raise NotOperations(f"project {project.slug} is a research project, not the site's operations project")
    allocation, created = Allocation.objects.get_or_create(project=project, cluster=cluster, defaults={"group": group})
    if not created and group and allocation.group != group:
        allocation.group = group
        allocation.save()
    return allocation


@transaction.atomic
def set_up_service_account(cluster: Cluster, username: str, *, project_slug: str = OPERATIONS_PROJECT,
                           group: str = "", new_key: bool = False, actor=None) -> tuple[ClusterAccount, bool]:
    """The site's operations project (created if missing), its allocation on `cluster` (charged to `group`) and
    its service account `username` there, with a key the portal generates: (account, whether the key is new).
    Site staff's health checks in that project run as this account. Run again: nothing changes unless the
    username differs or `new_key` asks for another key."""
    allocation = set_up_operations(cluster, project_slug=project_slug, group=group)
    project = allocation.project
    account = ClusterAccount.objects.filter(cluster=cluster, project=project).first()
    if account is not None and account.username == username and not new_key:
        return account, False
    return link_account(cluster, username=username, project=project, actor=actor), True


def request_verification(account: ClusterAccount, *, actor) -> None:
    """Ask a worker to check that the account logs in (no web request reaches a cluster), with its audit row."""
    with transaction.atomic():
        ClusterAccount.objects.filter(pk=account.pk).update(last_error="checking…")
        record("cluster_account.verify", actor=actor, target=account, cluster=account.cluster.slug)
        enqueue_on_commit(VERIFY_ACCOUNT, account.pk)


def verify_account(account_id: int) -> bool:
    """Log in with the account's key and check who we are (worker side)."""
    account = ClusterAccount.objects.select_related("cluster").get(pk=account_id)
    try:
        backend = backend_for(account.cluster, account)
        try:
            who = backend.whoami()
        finally:
            backend.close()
        if who != account.username:
            raise TransportError(f"the key logs in as {who!r}, not {account.username!r}")
    except (BackendError, TransportError, NoClusterAccount) as exc:
        ClusterAccount.objects.filter(pk=account.pk).update(last_error=str(exc)[:1000], verified_at=None)
        return False
    ClusterAccount.objects.filter(pk=account.pk).update(last_error="", verified_at=timezone.now())
    return True


@transaction.atomic
def set_project_usage(actor, allocation: Allocation, *, in_use: bool, hardware_ids: list[int]) -> Allocation:
    """A project's owners or admins choose, within what site admins granted, whether the project uses this cluster
    and which of its granted hardware types; a hardware type not granted is refused, never added."""
    allocation = Allocation.objects.select_for_update().select_related("project", "cluster").get(pk=allocation.pk)
    access.require(actor, allocation.project, "manage")
    granted = {hw.pk: hw for hw in allocation.granted_hardware()}
    beyond = sorted(set(hardware_ids) - set(granted))
    if beyond:
        raise ValidationError(f"hardware {beyond} is not granted to {allocation.project.slug} on {allocation.cluster.name}; "
                              "a site admin grants hardware")
    before = {"in_use": allocation.in_use, "unused": sorted(hw.slug for hw in allocation.unused_hardware.all())}
    unused = [hw for pk, hw in granted.items() if pk not in set(hardware_ids)]
    allocation.in_use = in_use
    allocation.save(update_fields=["in_use"])
    allocation.unused_hardware.set(unused)
    after = {"in_use": in_use, "unused": sorted(hw.slug for hw in unused)}
    if before != after:
        record("allocation.usage", actor=actor, project=allocation.project, target=allocation, cluster=allocation.cluster.slug,
               before=before, after=after)
    return allocation
