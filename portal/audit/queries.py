from __future__ import annotations

from datetime import date, datetime, time, timedelta

from django.db.models import Q, QuerySet
from django.utils import timezone

from portal.audit.models import AuditEntry


def filtered_entries(*, actor: str = "", action: str = "", project: str = "", ip: str | None = None,
                     since: date | None = None, until: date | None = None) -> QuerySet[AuditEntry]:
    """Audit rows, newest first. `action` matches a whole action, or an area's name (with or without its '.')
    every action of that area."""
    rows = AuditEntry.objects.select_related("actor", "project")
    if actor:
        rows = rows.filter(actor__username__iexact=actor)
    if action:
        # "budget" finds every budget.* action, as "budget." does (issue 25); "budget.set" finds that one.
        area = action if action.endswith(".") else action + "."
        rows = rows.filter(Q(action=action) | Q(action__startswith=area))
    if project:
        rows = rows.filter(project__slug=project)
    if ip:
        rows = rows.filter(ip=ip)
    if since:
        rows = rows.filter(created_at__gte=timezone.make_aware(datetime.combine(since, time.min)))
    if until:  # through that whole day
        rows = rows.filter(created_at__lt=timezone.make_aware(datetime.combine(until + timedelta(days=1), time.min)))
    return rows.order_by("-id")
