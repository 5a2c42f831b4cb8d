"""What of clusters a person can see."""

from __future__ import annotations

from django.db.models import QuerySet

from portal.clusters.models import Allocation, Cluster
from portal.projects import access


def visible_clusters(user) -> QuerySet[Cluster]:
    """Clusters where one of the caller's projects has an allocation."""
    if getattr(user, "is_staff", False):
        return Cluster.objects.all()
    allocated = Allocation.objects.filter(project__in=access.visible_projects(user)).values("cluster_id")
    return Cluster.objects.filter(pk__in=allocated)
