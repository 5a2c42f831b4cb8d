"""What is known of a cloud cluster between two looks at it: its queues (one per enabled hardware type) and what
the reconciler (portal/cloud/reconciler.py) last saw running there. Read by the health check, the comparison of
places and the pages; written by the reconciler. Pages never ask the provider."""

from __future__ import annotations

from django.core.cache import cache

from backends.aws_batch_defs import queue_for
from portal.clusters.connect import backend_settings
from portal.clusters.models import Cluster


def snapshot_key(cluster_id: int) -> str:
    """Where the reconciler (portal/cloud/reconciler.py) leaves what it last saw of a cloud cluster: what runs, whose
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
