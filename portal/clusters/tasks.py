from celery import shared_task

from portal.clusters.actions import verify_account


@shared_task
def verify_account_task(account_id: int) -> bool:
    return verify_account(account_id)
