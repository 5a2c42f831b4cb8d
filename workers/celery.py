"""The Celery app: configuration, routing and the beat schedule. No business logic lives here."""

from __future__ import annotations

import os

from celery import Celery
from celery.signals import task_postrun, task_prerun

from workers import broker_restart

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
broker_restart.install()

# Every task's base: tasks that carry work wait out a database outage (workers/database_outage.py).
app = Celery("kakehashi", task_cls="workers.database_outage:RetriesWhileTheDatabaseIsAway")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["portal.jobs", "portal.usage", "portal.cloud", "portal.clusters", "portal.storage",
                        "portal.notifications", "portal.samples", "portal.sessions"])


@task_prerun.connect
@task_postrun.connect
def _database_connections_as_per_request(task=None, **_: object) -> None:  # noqa: ANN001 - Celery's signal
    """What Django does around a web request, around a task: drop a connection that failed or is older than
    DATABASE_CONN_MAX_AGE (0, the default outside production: every task), keep it otherwise (settings:
    CELERY_DB_REUSE_MAX keeps Celery's own fix-up from closing it every time). Not for a task run inline (eager):
    that is the caller's connection, maybe inside its transaction."""
    if task is None or getattr(task.request, "is_eager", False):
        return
    from django.db import close_old_connections

    close_old_connections()


@app.on_after_finalize.connect
def _schedule(sender: Celery, **_: object) -> None:
    from django.conf import settings

    sender.conf.beat_schedule = {
        "track-all-clusters": {
            "task": "portal.jobs.tasks.track_all_clusters_task",
            "schedule": float(settings.KAKEHASHI_TRACK_INTERVAL),
        },
        "recover-stale-jobs": {
            "task": "portal.jobs.tasks.recover_stale_jobs_task",
            "schedule": float(settings.KAKEHASHI_RECOVER_INTERVAL),
        },
        "enforce-budgets": {
            "task": "portal.usage.tasks.enforce_budgets_task",
            "schedule": float(settings.KAKEHASHI_BUDGET_INTERVAL),
        },
        "reconcile-cloud": {
            "task": "portal.cloud.tasks.reconcile_cloud_task",
            "schedule": float(settings.KAKEHASHI_CLOUD_RECONCILE_INTERVAL),
        },
        "prune-data-caches": {
            "task": "portal.storage.tasks.prune_caches_task",
            "schedule": float(settings.KAKEHASHI_CACHE_PRUNE_INTERVAL),
        },
        "abort-abandoned-uploads": {
            "task": "portal.storage.tasks.abort_abandoned_uploads_task",
            "schedule": float(settings.KAKEHASHI_UPLOAD_SWEEP_INTERVAL),
        },
        "cluster-health": {
            "task": "portal.clusters.tasks.collect_cluster_health_task",
            "schedule": float(settings.KAKEHASHI_HEALTH_INTERVAL),
        },
        # What every job's GPUs do: read at the sampler's pace (reading faster finds nothing new).
        "watch-all-clusters": {
            "task": "portal.samples.tasks.watch_all_clusters_task",
            "schedule": float(max(settings.KAKEHASHI_SAMPLE_SECONDS, settings.KAKEHASHI_TRACK_INTERVAL, 1)),
        },
        # Daily: each person is told at most once a week (portal/samples/digest.py).
        "weekly-gpu-digest": {
            "task": "portal.samples.tasks.send_weekly_digests_task",
            "schedule": 86400.0,
        },
        "remind-forgotten-jobs": {
            "task": "portal.usage.tasks.remind_forgotten_jobs_task",
            "schedule": 600.0,
        },
    }
