"""Setting a cloud cluster up and tearing it down (`manage.py cloud_setup CLUSTER [--teardown]`).

The plan comes from the cluster's options (region, subnets, security groups, instance role) and its enabled
hardware types (one queue each: instance type and market from the scheduler mapping). Each queue's compute
environment may grow to `max_jobs_per_queue` (2) jobs of the hardware's largest size at once and shrinks to 0
vCPUs when idle: the most a queue can ever spend per hour is bounded by what the site set here.
"""

from __future__ import annotations

from django.core.cache import cache

from backends import aws_batch_setup
from backends.aws_batch import AWSBatchBackend
from backends.aws_batch_defs import queue_for, resource_prefix
from portal.audit.actions import record
from portal.clusters.connect import backend_settings, cloud_client
from portal.clusters.models import Cluster

CLOUD_KIND = AWSBatchBackend.kind


class NotACloudCluster(Exception):
    pass


def snapshot_key(cluster_id: int) -> str:
    """Where the reconciler (portal/usage/cloud.py) leaves what it last saw of a cloud cluster: what runs, whose
    it is, and how many jobs wait in each queue. Pages read it; they never ask AWS."""
    return f"kakehashi:cloud-running:{cluster_id}"


def last_seen(cluster: Cluster) -> dict | None:
    return cache.get(snapshot_key(cluster.pk))


def queues_of(cluster: Cluster) -> dict[str, object]:
    """Queue name → the hardware type it serves, for the cluster's enabled cloud hardware."""
    settings = backend_settings(cluster)
    queues = {}
    for hw in cluster.hardware.filter(enabled=True).order_by("slug"):
        mapping = hw.scheduler_mapping or {}
        if mapping.get("instance_type"):
            name = mapping.get("queue") or queue_for(mapping["instance_type"], mapping.get("market", "on-demand"), settings)
            queues[name] = hw
    return queues


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
    if cluster.kind != CLOUD_KIND:
        raise NotACloudCluster(f"{cluster.slug} is a {cluster.get_kind_display()} cluster, not AWS Batch")


def set_up(cluster: Cluster, *, actor=None) -> list[str]:
    """Create or update the cluster's compute environments, job queues and base job definitions (idempotent)."""
    _checked(cluster)
    done = aws_batch_setup.ensure(cloud_client(cluster, "batch"), setup_plan(cluster))
    record("cluster.cloud_setup", actor=actor, target=cluster, changes=[line for line in done if not line.startswith("unchanged")])
    return done


def tear_down(cluster: Cluster, *, actor=None) -> list[str]:
    """Remove every queue, compute environment and job definition named after the cluster."""
    _checked(cluster)
    done = aws_batch_setup.teardown(cloud_client(cluster, "batch"), resource_prefix(backend_settings(cluster)))
    record("cluster.cloud_teardown", actor=actor, target=cluster, changes=done)
    return done
