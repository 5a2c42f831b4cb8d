"""Telling people their jobs ended: a row for the portal's bell, an email by task name after the commit, each as
the person chose (Preference; no row = the defaults). Called by the one writer of a job's lifecycle
(portal/jobs/transitions.py) inside the transaction that ends the job, so a rolled-back ending tells nobody."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from portal.audit.actions import record
from portal.enqueue import SEND_NOTIFICATION_EMAIL, enqueue_on_commit
from portal.notifications.models import Kind, Notification, Preference
from portal.projects.models import Project


def preference_of(user) -> Preference:
    return Preference.objects.filter(user=user).first() or Preference(user=user)


def job_ended(job, kind: str) -> Notification | None:
    """The job's owner hears that it ended (Kind.ENDED), failed (Kind.FAILED) or that the budget cancelled it
    (Kind.BUDGET), in the portal and/or by email as they chose."""
    made = jobs_ended([(job, kind)])
    return made[0] if made else None


def jobs_ended(endings: Sequence[tuple[Any, str]]) -> list[Notification]:
    """`job_ended` for many jobs at once (a tracking cycle): three statements however many jobs end (owners,
    their preferences, one INSERT), so the tracker's cost does not grow with what ends."""
    if not endings:
        return []
    User = get_user_model()
    owners = User.objects.in_bulk({job.user_id for job, _ in endings})
    slugs = dict(Project.objects.filter(pk__in={job.project_id for job, _ in endings}).values_list("pk", "slug"))
    chosen = {p.user_id: p for p in Preference.objects.filter(user_id__in=owners)}
    rows = []
    for job, kind in endings:
        owner = owners[job.user_id]
        preference = chosen.get(owner.pk) or Preference(user=owner)
        state = job.get_state_display().lower()
        why = f": {job.state_reason}" if job.state_reason and kind != Kind.ENDED else ""
        text = f"Job {job.name} ({slugs.get(job.project_id, '')}) {state}{why}"[:500]
        if preference.wants("portal", kind):
            rows.append(Notification(user=owner, job=job, kind=kind, text=text))
        if preference.wants("email", kind) and owner.email:
            link = f"{settings.KAKEHASHI_SITE_URL}/jobs/{job.pk}/"
            enqueue_on_commit(SEND_NOTIFICATION_EMAIL, owner.email, f"[Kakehashi] {text}"[:200],
                              f"{text}\n\n{link}\n\nChoose what you are told under Settings → Notifications.")
    return Notification.objects.bulk_create(rows)


def unread(user) -> QuerySet[Notification]:
    return Notification.objects.filter(user=user, read_at__isnull=True)


def mark_read(user, ids: list[int] | None = None) -> int:
    """Mark the user's notifications (these, or all of them) read; someone else's are never touched."""
    rows = unread(user)
    if ids is not None:
        rows = rows.filter(pk__in=ids)
    return rows.update(read_at=timezone.now())


def save_preference(user, **choices: bool) -> Preference:
    """Save how `user` wants to hear of their jobs, with its audit row (turning off the e-mail of failures is
    worth knowing when someone else signed in as them)."""
    preference = preference_of(user)
    before = {name: getattr(preference, name) for name in choices}
    for name, value in choices.items():
        setattr(preference, name, bool(value))
    with transaction.atomic():
        preference.save()
        record("notification.preferences", actor=user, target=preference, before=before,
               after={name: getattr(preference, name) for name in choices})
    return preference
