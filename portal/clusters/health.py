"""Cluster health: the beat asks every enabled cluster how busy it is and keeps the answer in ClusterHealth.

One call per cluster per cycle (`Backend.load`: `squeue`/`sinfo` on Slurm, `qstat -f` on Grid Engine, `qstat` and
`pbsnodes` on PBS, the portal's queues on AWS Batch), as one identity (a configured `monitor_username`, else
any account linked there: queues are readable by every user, docs/decisions/0003). Pages, the API and the
comparison before Run read the row; a web request never asks a scheduler (docs/decisions/0004). A cluster that
does not answer keeps its last figures, marked unreachable, with the error and when it last answered.
"""

from __future__ import annotations

import logging

from django.db.models import F
from django.utils import timezone

from backends.base import BackendError, TransportError
from portal.clusters.cloud_state import queues_of
from portal.clusters.connect import NoClusterAccount, backend_for, is_cloud, reach_of
from portal.clusters.models import Cluster, ClusterAccount, ClusterHealth

log = logging.getLogger(__name__)


def health_account(cluster: Cluster) -> ClusterAccount | None:
    """Whose login asks about the queue: the cluster's monitor account, else a verified one, else any."""
    if not reach_of(cluster).uses_cluster_account:
        return None
    accounts = ClusterAccount.objects.filter(cluster=cluster)
    monitor = cluster.options.get("monitor_username")
    if monitor and (account := accounts.filter(username=monitor).first()):
        return account
    return accounts.order_by(F("verified_at").asc(nulls_last=True), "pk").first()


def collect(cluster: Cluster) -> ClusterHealth:
    """Ask one cluster how busy it is and record the answer (or why there was none)."""
    now = timezone.now()
    # get_or_create: the beat and a site admin's "check now" may collect the same cluster at once (one row each).
    health, _ = ClusterHealth.objects.get_or_create(cluster=cluster, defaults={"checked_at": now})
    health.checked_at = now
    by_queue = queues_of(cluster) if is_cloud(cluster) else {}
    queues = list(by_queue)
    try:
        load = backend_for(cluster, health_account(cluster)).load(queues)
    except (BackendError, TransportError, NoClusterAccount) as exc:
        log.info("cluster health of %s: %s", cluster.slug, exc)
        health.reachable, health.last_error, health.error_at = False, str(exc)[:2000], now
        health.save()
        return health
    # It answered: an earlier error is history, not its state (the page showed it as "Last error" for ever).
    health.reachable, health.answered_at, health.last_error = True, now, ""
    health.unavailable = {by_queue[q].slug: why for q, why in load.unavailable.items() if q in by_queue}
    if cluster.last_error:
        Cluster.objects.filter(pk=cluster.pk).update(last_error="")
    health.pending, health.running = load.pending, load.running
    health.free_nodes, health.total_nodes = load.free_nodes, load.total_nodes
    health.expected_start, health.per_queue = load.expected_start, dict(load.per_queue)
    health.save()
    return health


def collect_all() -> list[ClusterHealth]:
    return [collect(cluster) for cluster in Cluster.objects.filter(enabled=True).order_by("pk")]
