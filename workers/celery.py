"""The Celery app: configuration, routing and the beat schedule. No business logic lives here."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

app = Celery("kakehashi")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["portal.jobs", "portal.usage", "portal.clusters", "portal.storage",
                        "portal.notifications"])


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
            "task": "portal.usage.tasks.reconcile_cloud_task",
            "schedule": float(settings.KAKEHASHI_CLOUD_RECONCILE_INTERVAL),
        },
        "abort-abandoned-uploads": {
            "task": "portal.storage.tasks.abort_abandoned_uploads_task",
            "schedule": float(settings.KAKEHASHI_UPLOAD_SWEEP_INTERVAL),
        },
        "cluster-health": {
            "task": "portal.clusters.tasks.collect_cluster_health_task",
            "schedule": float(settings.KAKEHASHI_HEALTH_INTERVAL),
        },
        "remind-forgotten-jobs": {
            "task": "portal.usage.tasks.remind_forgotten_jobs_task",
            "schedule": 600.0,
        },
    }
