"""Telling people their jobs ended: a row for the portal's bell, an email by task name after the commit, each as
the person chose (Preference; no row = the defaults). Called by the one writer of a job's lifecycle
(portal/jobs/transitions.py) inside the transaction that ends the job, so a rolled-back ending tells nobody."""

from __future__ import annotations

from django.conf import settings
from django.db.models import QuerySet
from django.utils import timezone

from portal.enqueue import SEND_NOTIFICATION_EMAIL, enqueue_on_commit
from portal.notifications.models import Kind, Notification, Preference


def preference_of(user) -> Preference:
    return Preference.objects.filter(user=user).first() or Preference(user=user)


def job_ended(job, kind: str) -> Notification | None:
    """The job's owner hears that it ended (Kind.ENDED), failed (Kind.FAILED) or that the budget cancelled it
    (Kind.BUDGET), in the portal and/or by email as they chose."""
    preference = preference_of(job.user)
    state = job.get_state_display().lower()
    why = f": {job.state_reason}" if job.state_reason and kind != Kind.ENDED else ""
    text = f"Job {job.name} ({job.project.slug}) {state}{why}"[:500]
    notification = None
    if preference.wants("portal", kind):
        notification = Notification.objects.create(user=job.user, job=job, kind=kind, text=text)
    if preference.wants("email", kind) and job.user.email:
        link = f"{settings.KAKEHASHI_SITE_URL}/jobs/{job.pk}/"
        enqueue_on_commit(SEND_NOTIFICATION_EMAIL, job.user.email, f"[Kakehashi] {text}"[:200],
                          f"{text}\n\n{link}\n\nChoose what you are told under Settings → Notifications.")
    return notification


def unread(user) -> QuerySet[Notification]:
    return Notification.objects.filter(user=user, read_at__isnull=True)


def mark_read(user, ids: list[int] | None = None) -> int:
    """Mark the user's notifications (these, or all of them) read; someone else's are never touched."""
    rows = unread(user)
    if ids is not None:
        rows = rows.filter(pk__in=ids)
    return rows.update(read_at=timezone.now())


def save_preference(user, **choices: bool) -> Preference:
    preference = preference_of(user)
    for name, value in choices.items():
        setattr(preference, name, bool(value))
    preference.save()
    return preference
