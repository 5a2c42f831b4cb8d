"""Setting a cloud cluster up and tearing it down (`manage.py cloud_setup CLUSTER [--teardown]`), the first of the
cloud room's parts (portal/cloud/: setup, the reconciler, the price list, their two commands).

The plan comes from the cluster's options (region, subnets, security groups, instance role) and its enabled
hardware types (one queue each: instance type and market from the scheduler mapping). Each queue's compute
environment may grow to `max_jobs_per_queue` (2) jobs of the hardware's largest size at once and shrinks to 0
vCPUs when idle: the most a queue can ever spend per hour is bounded by what the site set here.
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from backends import aws_batch_setup
from backends.aws_batch_defs import resource_prefix
from portal.audit.actions import record
from portal.clusters.connect import backend_settings, cloud_client, is_cloud
from portal.clusters.models import Cluster, ClusterHealth

TORN_DOWN = "torn down"  # how a teardown's reason starts: set_up enables only what a teardown disabled


class NotACloudCluster(Exception):
    pass


def setup_plan(cluster: Cluster) -> aws_batch_setup.SitePlan:
    per_queue = int(cluster.options.get("max_jobs_per_queue", 2))
    hardware = []
    for hw in cluster.hardware.filter(enabled=True).order_by("slug"):  # catalog.HardwareType, by its relation
        mapping = hw.scheduler_mapping or {}
        if not mapping.get("instance_type"):
            raise NotACloudCluster(f"hardware type {hw.slug} names no instance_type in its scheduler mapping")
        hardware.append((mapping["instance_type"], mapping.get("market", "on-demand"),
                         max(hw.cpus_per_node, 1) * max(hw.max_nodes, 1) * per_queue))
    return aws_batch_setup.site_plan(backend_settings(cluster), hardware)


def _checked(cluster: Cluster) -> None:
    if not is_cloud(cluster):
        raise NotACloudCluster(f"{cluster.slug} is a {cluster.get_kind_display()} cluster, not AWS Batch")


def set_up(cluster: Cluster, *, actor=None) -> list[str]:
    """Create or update the cluster's compute environments, job queues and base job definitions (idempotent)."""
    _checked(cluster)
    done = aws_batch_setup.ensure(cloud_client(cluster, "batch"), setup_plan(cluster))
    with transaction.atomic():
        if not cluster.enabled and cluster.disabled_reason.startswith(TORN_DOWN):
            # Withdrawn by a teardown, offered again now that its queues exist.
            cluster.enabled, cluster.disabled_reason = True, ""
            cluster.save(update_fields=["enabled", "disabled_reason"])
            done.append(f"enabled cluster {cluster.slug} again")
        # What the health check knew of missing queues (and the tracker's error about them) is out of date now.
        ClusterHealth.objects.filter(cluster=cluster).update(unavailable={}, last_error="")
        Cluster.objects.filter(pk=cluster.pk).update(last_error="")
        record("cluster.cloud_setup", actor=actor, target=cluster,
               changes=[line for line in done if not line.startswith("unchanged")])
    return done


def tear_down(cluster: Cluster, *, actor=None) -> list[str]:
    """Remove every queue, compute environment and job definition named after the cluster."""
    _checked(cluster)
    done = aws_batch_setup.teardown(cloud_client(cluster, "batch"), resource_prefix(backend_settings(cluster)))
    with transaction.atomic():
        # No queue is left to take a job: withdraw the cluster, saying why, so nothing offers it (presets, the
        # comparison, the job form) and a submit is refused before it reaches AWS.
        cluster.enabled = False
        cluster.disabled_reason = (f"{TORN_DOWN} on {timezone.localdate():%Y-%m-%d}: its AWS Batch queues were "
                                   "removed (a site admin runs manage.py cloud_setup to bring them back)")
        cluster.save(update_fields=["enabled", "disabled_reason"])
        done.append(f"disabled cluster {cluster.slug}")
        record("cluster.cloud_teardown", actor=actor, target=cluster, changes=done)
    return done
