"""Celery tasks for jobs: thin, take IDs, idempotent; the work is in actions, tracking and outputs.

Tasks import actions, never the reverse: actions ask for these by name through `portal.enqueue`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from celery import current_app, shared_task
from django.conf import settings
from django.core.cache import cache
from django.db import InterfaceError, OperationalError
from django.utils import timezone

from portal.jobs import outputs, tracking
from portal.jobs.actions.cancel import cancel_on_scheduler
from portal.jobs.actions.dispatch import dispatch_job, recover_stale_jobs
from portal.jobs.models import TRACKED_STATES, Job, JobState

log = logging.getLogger(__name__)


@shared_task(bind=True, max_retries=None, retry_while_database_away=True)
def dispatch_job_task(self, job_id: int) -> str:
    row = Job.objects.filter(pk=job_id).values_list("cluster_id", "state", "array_index", "dispatch_lease_until").first()
    cluster_id, state, array_index, lease = row or (None, None, None, None)
    if array_index is None and state is not None:
        # Taken along by another job's dispatch meanwhile (docs/decisions/0022), or done: no slot needed to say
        # so. Whoever holds the lease records it; if that worker dies, the recovery sweep sends it again.
        if state not in {JobState.QUEUED, JobState.SUBMITTING}:
            return "skipped"
        if state == JobState.SUBMITTING and lease is not None and lease > timezone.now():
            return "busy"
    with cluster_slot(cluster_id) as slot:
        if not slot:
            # The cluster has its share of the workers already (a slow login node, or a burst): ask again in a
            # moment without holding a worker meanwhile, so other clusters' jobs go ahead. The slot's holder takes
            # along what is queued for the same account, so this job is usually gone by then.
            dispatch_job_task.apply_async((job_id,), countdown=settings.KAKEHASHI_SLOT_RETRY_SECONDS)
            return "deferred"
        outcome = dispatch_job(job_id)
    if outcome.status == "retry":
        # Login node unreachable or scheduler hiccup: back off (5 s, 10 s, … up to 5 min) and try again.
        delay = min(5 * 2 ** min(self.request.retries, 6), 300)
        log.warning("job %s: dispatch will retry in %s s: %s", job_id, delay, outcome.detail)
        raise self.retry(countdown=delay)
    return outcome.status


@contextmanager
def cluster_slot(cluster_id: int | None) -> Iterator[bool]:
    """One of the cluster's KAKEHASHI_CLUSTER_TASK_SLOTS, held (in Redis, over all workers) while inside; False if
    all are taken. A slot a killed worker held frees itself after a dispatch lease."""
    if cluster_id is None or current_app.conf.task_always_eager:
        yield True  # nothing to dispatch (dispatch says why), or no pool to share (tasks run inline)
        return
    taken = None
    for index in range(settings.KAKEHASHI_CLUSTER_TASK_SLOTS):
        key = f"kakehashi:cluster-slot:{cluster_id}:{index}"
        if cache.add(key, 1, timeout=settings.KAKEHASHI_DISPATCH_LEASE_SECONDS):
            taken = key
            break
    try:
        yield taken is not None
    finally:
        if taken is not None:
            cache.delete(taken)


@shared_task
def track_cluster_task(cluster_id: int) -> dict:
    # One tracker per cluster at a time: overlapping cycles would only repeat the same scheduler call.
    lock = f"kakehashi:track:{cluster_id}"
    if not cache.add(lock, 1, timeout=max(settings.KAKEHASHI_TRACK_INTERVAL * 4, 30)):
        return {"skipped": True}
    try:
        report = tracking.track_cluster(cluster_id)
    finally:
        cache.delete(lock)
    return report.__dict__


@shared_task
def track_all_clusters_task() -> list[int]:
    cluster_ids = sorted(
        set(Job.objects.filter(state__in=TRACKED_STATES).exclude(scheduler_id="").values_list("cluster_id", flat=True))
    )
    for cluster_id in cluster_ids:
        track_cluster_task.delay(cluster_id)
    return cluster_ids


@shared_task
def recover_stale_jobs_task() -> list[int]:
    return recover_stale_jobs()


@shared_task(bind=True, max_retries=5, retry_while_database_away=True)
def cancel_job_task(self, job_id: int) -> str:
    # A cancel is a command on the login node like a dispatch: it takes one of the cluster's slots too, so a slow
    # login node holds no more workers with cancels than with submits (a deferral is not a retry: no count).
    with cluster_slot(_cluster_of(job_id)) as slot:
        if not slot:
            cancel_job_task.apply_async((job_id,), countdown=settings.KAKEHASHI_SLOT_RETRY_SECONDS)
            return "deferred"
        try:
            return cancel_on_scheduler(job_id)
        except (OperationalError, InterfaceError):
            raise  # the database is away: waited out by the task's base (workers/database_outage.py), not counted
        except Exception as exc:  # noqa: BLE001 - any transport trouble: retry, the request is on record
            raise self.retry(exc=exc, countdown=5) from None


@shared_task(retry_while_database_away=True)
def fetch_output_task(job_id: int) -> dict:
    # Reading a finished job's files goes to its login node as well: bounded by the same slots.
    with cluster_slot(_cluster_of(job_id)) as slot:
        if not slot:
            fetch_output_task.apply_async((job_id,), countdown=settings.KAKEHASHI_SLOT_RETRY_SECONDS)
            return {"deferred": True}
        return outputs.fetch_output(job_id)


def _cluster_of(job_id: int) -> int | None:
    return Job.objects.filter(pk=job_id).values_list("cluster_id", flat=True).first()


@shared_task(retry_while_database_away=True)
def record_health_check_task(job_id: int) -> dict | None:
    return outputs.record_health_check(job_id)
