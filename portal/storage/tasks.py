from __future__ import annotations

from celery import shared_task

from portal.storage import uploads


@shared_task
def abort_abandoned_uploads_task() -> int:
    return uploads.abort_abandoned_uploads()
