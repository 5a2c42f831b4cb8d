"""Why something happened to a job: the typed cause every JobEvent carries (docs/decisions/0026).

Readers (notifications, the job page, the API, the CLI) switch on the cause, never on the words of a reason: the
words are written once, for people, by the event's own function in `portal/jobs/events.py`, and may change; the
cause may not. A new behaviour adds a cause here (and a function in events.py that writes it), not a phrase.
"""

from __future__ import annotations

from django.db import models


class Cause(models.TextChoices):
    # The portal's own steps
    SUBMITTED = "submitted", "Submitted"  # recorded, its estimate reserved; waiting for a worker
    DISPATCHED = "dispatched", "Handed to the scheduler"  # a worker submits it / the scheduler accepted it
    STAGED = "staged", "Data staged"  # datasets copied to (or found in) the cluster's cache
    REFUSED = "refused", "Refused"  # the scheduler, or the data it needed, refused the job before it queued
    # What the scheduler says
    SCHEDULER = "scheduler", "Seen by the scheduler"  # its queue moved the job (pending → running) or cleaned it up
    ACCOUNTING = "accounting", "Ended (accounting)"  # accounting's final record: completed or failed
    WALLTIME = "walltime", "Ran out of time"  # killed at its walltime (the scheduler's limit)
    LOST = "lost", "Lost"  # neither the queue nor accounting knows it
    # Cancels: asked for, and the ending each one leads to
    CANCEL_REQUESTED = "cancel_requested", "Cancel requested"
    CANCELLED_BY_OWNER = "cancelled_by_owner", "Cancelled by its owner"
    CANCELLED_BY_ADMIN = "cancelled_by_admin", "Cancelled by a project admin"
    CANCELLED_BY_BUDGET = "cancelled_by_budget", "Cancelled by the project's strict budget"
    CANCELLED_OUTSIDE = "cancelled_outside", "Cancelled on the cluster, outside Kakehashi"
    RECONCILER = "reconciler", "Stopped by the cloud reconciler"
    CANCELLED_IDLE = "cancelled_idle", "Cancelled by the idle-GPU rule"
    # Watching what runs
    REMINDER = "reminder", "Owner reminded"  # running longer than the project's reminder threshold
    IDLE_WARNED = "idle_warned", "Owner warned: GPUs idle"  # the idle rule's warning, with the samples
    IDLE_KEPT = "idle_kept", "Kept running while idle"  # its owner chose to keep it (bounded, counted)
    # An interactive session's server told the portal where it listens (portal/sessions/): it can be connected to.
    SESSION_READY = "session_ready", "Session ready"
    # An event written before causes existed whose words name none of the above.
    OTHER = "other", "Other"


# The causes that end a job as cancelled because someone or something asked; the job keeps the one asked for
# (Job.cancel_cause) until the scheduler confirms, and its ending event carries it.
CANCEL_CAUSES = frozenset({Cause.CANCELLED_BY_OWNER, Cause.CANCELLED_BY_ADMIN, Cause.CANCELLED_BY_BUDGET,
                           Cause.RECONCILER, Cause.CANCELLED_IDLE})
