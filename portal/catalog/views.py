"""The site admin's overview: clusters and how they answer, hardware with prices and measured speed, software."""

from __future__ import annotations

from django.contrib.admin.views.decorators import staff_member_required
from django.shortcuts import render

from portal.catalog.models import HardwareType, Preset, Software
from portal.clusters.models import Cluster
from portal.jobs.models import ACTIVE_STATES, Job


@staff_member_required
def site_admin(request):
    clusters = Cluster.objects.all()
    active = {row["cluster"]: row["n"] for row in _active_counts()}
    return render(request, "catalog/site_admin.html", {
        "clusters": [(c, active.get(c.pk, 0)) for c in clusters],
        "hardware": HardwareType.objects.select_related("cluster"),
        "software": Software.objects.prefetch_related("clusters"),
        "presets": Preset.objects.all(),
    })


def _active_counts():
    from django.db.models import Count

    return Job.objects.filter(state__in=ACTIVE_STATES).values("cluster").annotate(n=Count("id"))
