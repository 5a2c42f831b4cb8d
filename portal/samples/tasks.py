from __future__ import annotations

from celery import shared_task
from django.conf import settings
from django.core.cache import cache

from portal.samples import digest, fetch


@shared_task(retry_while_database_away=True)
def watch_cluster_task(cluster_id: int) -> dict:
    # One reader per cluster at a time: two would read the same bytes (the offsets keep them from being added twice).
    lock = f"kakehashi:watch:{cluster_id}"
    if not cache.add(lock, 1, timeout=max(settings.KAKEHASHI_TRACK_INTERVAL * 4, 60)):
        return {"skipped": True}
    try:
        return fetch.watch_cluster(cluster_id).__dict__
    finally:
        cache.delete(lock)


@shared_task(retry_while_database_away=True)
def send_weekly_digests_task() -> list[int]:
    return digest.send_weekly_digests()


@shared_task
def watch_all_clusters_task() -> list[int]:
    """Beside the tracker, at the sample interval: every cluster with a running job, or with a job that ended lately
    whose last samples are not read yet (a cluster with nothing left to track still gets them)."""
    cluster_ids = fetch.clusters_to_watch()
    for cluster_id in cluster_ids:
        watch_cluster_task.delay(cluster_id)
    return cluster_ids
