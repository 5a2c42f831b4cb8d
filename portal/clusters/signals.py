"""Access changes are audited however they are made (the Django admin's allocation page, the project page's
inline, a shell): a grant of a cluster to a project, its revocation, and a change of the hardware it may use.

Signals, not an action the admin calls, because the admin saves allocations from two pages and m2m changes
arrive after the row is saved; the person is the request's (portal.audit.actions.request_actor).
"""

from __future__ import annotations

from django.db.models.signals import m2m_changed, post_delete, post_save, pre_save
from django.dispatch import receiver

from portal.audit.actions import record, request_actor
from portal.clusters.models import Allocation


def _allowed(allocation: Allocation) -> list[str]:
    """The hardware slugs the project may use on the cluster; [] = all of them."""
    return sorted(allocation.hardware.values_list("slug", flat=True))


@receiver(pre_save, sender=Allocation)
def _remember_group(sender, instance: Allocation, **kwargs):
    before = Allocation.objects.filter(pk=instance.pk).values_list("group", flat=True).first() if instance.pk else None
    instance._group_before = before


@receiver(post_save, sender=Allocation)
def _granted(sender, instance: Allocation, created: bool, **kwargs):
    if created:
        record("access.grant", actor=request_actor(), project=instance.project, target=instance,
               cluster=instance.cluster.slug, group=instance.group)
    elif getattr(instance, "_group_before", instance.group) != instance.group:
        record("access.group", actor=request_actor(), project=instance.project, target=instance,
               cluster=instance.cluster.slug, group=instance.group, was=instance._group_before)


@receiver(post_delete, sender=Allocation)
def _revoked(sender, instance: Allocation, origin=None, **kwargs):
    # When the project or the cluster itself is being deleted, the row must not point at it (it goes too).
    direct = isinstance(origin, Allocation) or getattr(origin, "model", None) is Allocation
    record("access.revoke", actor=request_actor(), project=instance.project if direct else None,
           project_slug=instance.project.slug, cluster=instance.cluster.slug, group=instance.group,
           **({} if direct else {"because": f"{type(origin).__name__} deleted"}))


@receiver(m2m_changed, sender=Allocation.hardware.through)
def _restricted(sender, instance, action: str, reverse: bool, model, pk_set, **kwargs):
    # `model` is the hardware type (catalog depends on clusters, so it is not imported here).
    if reverse or action not in ("pre_clear", "post_add", "post_remove"):
        return
    if action == "pre_clear":
        changed, allowed = _allowed(instance), []
    else:
        changed = sorted(model.objects.filter(pk__in=pk_set or ()).values_list("slug", flat=True))
        allowed = _allowed(instance)
        if not changed:
            return
    verb = "added" if action == "post_add" else "removed"
    record("access.hardware", actor=request_actor(), project=instance.project, target=instance,
           cluster=instance.cluster.slug, **{verb: changed}, allowed=allowed or "all hardware of the cluster")
