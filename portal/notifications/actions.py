"""The one way to tell a person: a row for the portal's bell and an email by task name after the commit, each as
the person chose (Preference; no row = the defaults). Called inside the transaction of what it tells of (a job's
ending, a budget passing a threshold), so a rolled-back change tells nobody.

What is said, to whom and of which kind is decided by the module that knows the event (portal/jobs/notices.py for
jobs and sweeps, portal/usage/enforcement.py for budgets); this module only delivers, in bulk: three statements
however many notices (their people, their preferences, one INSERT)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from portal.audit.actions import record
from portal.enqueue import SEND_NOTIFICATION_EMAIL, enqueue_on_commit
from portal.notifications.models import Kind, Notification, Preference


@dataclass(frozen=True, slots=True)
class Notice:
    """One thing to tell one person: its kind (Kind), the sentence, the page it is about and what it links to."""

    user_id: int
    kind: str
    text: str
    link: str  # the page it is about, from the site's root ("/jobs/12/")
    job_id: int | None = None
    sweep_id: int | None = None
    project_id: int | None = None
    details: str = ""  # more for the email (the figures, what to do next)


def preference_of(user) -> Preference:
    return Preference.objects.filter(user=user).first() or Preference(user=user)


def tell(notices: Sequence[Notice]) -> list[Notification]:
    """Tell each person what each notice says, in the portal and/or by email as they chose."""
    if not notices:
        return []
    people = get_user_model().objects.in_bulk({notice.user_id for notice in notices})
    chosen = {p.user_id: p for p in Preference.objects.filter(user_id__in=people)}
    rows = []
    for notice in notices:
        person = people.get(notice.user_id)
        if person is None or not person.is_active:
            continue
        preference = chosen.get(person.pk) or Preference(user=person)
        text = notice.text[:500]
        if preference.wants("portal", notice.kind):
            rows.append(Notification(user=person, kind=notice.kind, text=text, job_id=notice.job_id,
                                     sweep_id=notice.sweep_id, project_id=notice.project_id))
        if preference.wants("email", notice.kind) and person.email:
            link = f"{settings.KAKEHASHI_SITE_URL}{notice.link}"
            body = "\n\n".join(part for part in (text, notice.details, link) if part)
            enqueue_on_commit(SEND_NOTIFICATION_EMAIL, person.email, f"[Kakehashi] {text}"[:200],
                              f"{body}\n\nChoose what you are told under Settings → Notifications.")
    return Notification.objects.bulk_create(rows)


def link_of(notification: Notification) -> str:
    """The page a notification is about, for the bell's list."""
    if notification.job_id:
        return f"/jobs/{notification.job_id}/"
    if notification.sweep_id:
        return f"/jobs/groups/{notification.sweep_id}/"
    if notification.project_id:
        return f"/projects/{notification.project.slug}/"
    return ""


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


__all__ = ["Kind", "Notice", "link_of", "mark_read", "preference_of", "save_preference", "tell", "unread"]
