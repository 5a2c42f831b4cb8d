"""Work for a worker, asked for by task name once the transaction commits.

Actions never import tasks (nor the Celery app): they name the task here, the way Zulip's
`queue_event_on_commit` names a queue. Tasks import actions, never the reverse, so there is no import circle
between them, and a rolled-back transaction enqueues nothing. Each name below is the one a task module
registers (`portal/<app>/tasks.py`); tests/portal/test_layering.py checks that each one exists.
"""

from __future__ import annotations

from celery import current_app
from django.db import transaction

DISPATCH_JOB = "portal.jobs.tasks.dispatch_job_task"
CANCEL_JOB = "portal.jobs.tasks.cancel_job_task"
FETCH_OUTPUT = "portal.jobs.tasks.fetch_output_task"
RECORD_HEALTH_CHECK = "portal.jobs.tasks.record_health_check_task"
VERIFY_ACCOUNT = "portal.clusters.tasks.verify_account_task"
VERIFY_DATASET = "portal.storage.tasks.verify_dataset_task"
VERIFY_UPLOAD = "portal.storage.tasks.verify_upload_task"
PACK_FILES = "portal.storage.tasks.pack_files_task"
SEND_NOTIFICATION_EMAIL = "portal.notifications.tasks.send_notification_email_task"
FORGET_HUB_SERVER = "portal.sessions.tasks.forget_hub_server_task"

TASKS = (DISPATCH_JOB, CANCEL_JOB, FETCH_OUTPUT, RECORD_HEALTH_CHECK, VERIFY_ACCOUNT, VERIFY_DATASET, VERIFY_UPLOAD,
         PACK_FILES, SEND_NOTIFICATION_EMAIL, FORGET_HUB_SERVER)


def enqueue(task: str, *args: object, countdown: float | None = None) -> None:
    """Send the task now (outside a transaction, or when what it reads is committed already), to run at once or
    `countdown` seconds later."""
    if current_app.conf.task_always_eager:
        # Run it here and now (CELERY_TASK_ALWAYS_EAGER): the task modules must be loaded for that.
        current_app.loader.import_default_modules()
    current_app.signature(task, args=args).apply_async(countdown=countdown)


def enqueue_on_commit(task: str, *args: object, countdown: float | None = None) -> None:
    """Send the task once the current transaction commits (at once outside one); nothing if it rolls back."""
    transaction.on_commit(lambda: enqueue(task, *args, countdown=countdown))
