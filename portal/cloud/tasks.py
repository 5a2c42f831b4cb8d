from __future__ import annotations

from celery import shared_task

from portal.cloud import reconciler


@shared_task
def reconcile_cloud_task() -> list[dict]:
    """Stop what AWS runs that the portal does not know or that ran past its walltime (portal/cloud/reconciler.py)."""
    return [{"cluster": r.cluster, "running": len(r.running), "stopped": [s.scheduler_id for s in r.stopped],
             "error": r.error} for r in reconciler.reconcile_all()]
