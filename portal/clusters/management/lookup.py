"""What the clusters' management commands share: the cluster named on the command line."""

from __future__ import annotations

from django.core.management.base import CommandError

from portal.clusters.models import Cluster


def cluster_named(slug: str) -> Cluster:
    """The cluster with this slug; CommandError saying there is none otherwise."""
    cluster = Cluster.objects.filter(slug=slug).first()
    if cluster is None:
        raise CommandError(f"no cluster {slug!r}")
    return cluster
