from __future__ import annotations

from typing import Any

from django.db import models

from portal.audit.models import AuditEntry


def record(action: str, *, actor=None, project=None, target: models.Model | None = None, **data: Any) -> AuditEntry:
    """Write one audit row. Call inside the transaction of the change it describes."""
    return AuditEntry.objects.create(
        action=action,
        actor=actor if getattr(actor, "is_authenticated", False) else None,
        project=project,
        target_type=target._meta.label_lower if target is not None else "",
        target_id=str(target.pk) if target is not None else "",
        data=data,
    )
