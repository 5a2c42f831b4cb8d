from celery import shared_task

from backends.base import BackendError, TransportError
from portal.storage import datasets, uploads


@shared_task
def abort_abandoned_uploads_task() -> int:
    return uploads.abort_abandoned_uploads()


@shared_task(autoretry_for=(BackendError, TransportError), retry_backoff=5, max_retries=20,
             retry_while_database_away=True)
def verify_dataset_task(dataset_id: int, user_id: int) -> str:
    return datasets.verify_dataset(dataset_id, user_id)
