from botocore.exceptions import BotoCoreError
from celery import shared_task

from backends.base import BackendError, TransportError
from portal.storage import caches, datasets, packs, uploads, verify
from portal.storage.errors import StorageError
from portal.storage.objectstore import ObjectStoreError


@shared_task
def abort_abandoned_uploads_task() -> int:
    return uploads.abort_abandoned_uploads() + verify.lost_verifications() + packs.drop_abandoned()


@shared_task
def prune_caches_task() -> int:
    return caches.prune_all()


@shared_task(autoretry_for=(BackendError, TransportError), retry_backoff=5, max_retries=20,
             retry_while_database_away=True)
def verify_dataset_task(dataset_id: int, user_id: int) -> str:
    return datasets.verify_dataset(dataset_id, user_id)


# The store unreachable, or a read cut off mid-object (botocore's streaming errors): hash it again from the start.
@shared_task(autoretry_for=(StorageError, ObjectStoreError, BotoCoreError), retry_backoff=5, max_retries=20)
def verify_upload_task(session_id: str) -> str:
    return verify.verify_upload(session_id)


# A file deleted while its pack was written (its GET fails, the pack is dropped) or the store away: again, with
# what the project holds then.
@shared_task(autoretry_for=(ObjectStoreError, BotoCoreError, OSError), retry_backoff=5, max_retries=10)
def pack_files_task(project_id: int) -> int:
    return packs.pack_project(project_id)
