"""The job state vocabulary. It lives below the apps because storage asks whether a job that holds a file or a
dataset is still in flight (portal/storage/manage.py, caches.py) and storage sits under the jobs app: jobs stage
datasets, so storage must not import jobs (tests/portal/test_layering.py)."""

from __future__ import annotations

from django.db import models


class JobState(models.TextChoices):
    QUEUED = "queued", "Queued"  # recorded by the portal, waiting for a worker to submit it
    SUBMITTING = "submitting", "Submitting"  # a worker is handing it to the scheduler
    PENDING = "pending", "Pending"  # the scheduler has it, waiting for nodes
    RUNNING = "running", "Running"
    COMPLETED = "completed", "Completed"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"
    TIMED_OUT = "timed_out", "Timed out"
    LOST = "lost", "Lost"  # neither the queue nor accounting knows it: flagged for a person to look at


FINAL_STATES = frozenset({JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED, JobState.TIMED_OUT})
ACTIVE_STATES = frozenset({JobState.QUEUED, JobState.SUBMITTING, JobState.PENDING, JobState.RUNNING, JobState.LOST})
