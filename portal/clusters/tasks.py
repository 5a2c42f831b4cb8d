from celery import shared_task

from portal.clusters.actions import verify_account
from portal.clusters.health import collect_all


@shared_task(retry_while_database_away=True)
def verify_account_task(account_id: int) -> bool:
    return verify_account(account_id)


@shared_task
def collect_cluster_health_task() -> int:
    """Beat: how busy every enabled cluster is, into ClusterHealth (portal/clusters/health.py)."""
    return sum(1 for health in collect_all() if health.reachable)
