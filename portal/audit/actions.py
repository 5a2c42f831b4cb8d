"""The audit log: who did what to which object, from where. Written in the same transaction as the change.

The address is the request's REMOTE_ADDR (client_ip: X-Forwarded-For proves nothing unless the site's own proxy
rewrites it), taken from the request being handled; rows written by workers and
management commands have none.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from django.db import models

from portal.audit.models import AuditEntry

_current_ip: ContextVar[str | None] = ContextVar("audit_ip", default=None)
_current_actor: ContextVar[Any] = ContextVar("audit_actor", default=None)


def client_ip(request) -> str | None:
    # REMOTE_ADDR only: X-Forwarded-For is set by whoever sends the request and proves nothing unless a proxy
    # we trust rewrites it (configure that at the proxy, which then sets REMOTE_ADDR for gunicorn).
    return request.META.get("REMOTE_ADDR") or None


@contextmanager
def request_origin(request) -> Iterator[None]:
    token = _current_ip.set(client_ip(request))
    actor_token = _current_actor.set(getattr(request, "user", None))
    try:
        yield
    finally:
        _current_actor.reset(actor_token)
        _current_ip.reset(token)


def request_actor():
    """Who is signed in for the request being handled (None for workers and commands): for audit rows written
    where the change happens without the request at hand (signals)."""
    return _current_actor.get()


def record(action: str, *, actor=None, project=None, target: models.Model | None = None, request=None,
           **data: Any) -> AuditEntry:
    """Write one audit row. Call inside the transaction of the change it describes. The address is `request`'s,
    or that of the request being handled."""
    return AuditEntry.objects.create(
        action=action,
        actor=actor if getattr(actor, "is_authenticated", False) else None,
        project=project,
        target_type=target._meta.label_lower if target is not None else "",
        target_id=str(target.pk) if target is not None else "",
        ip=client_ip(request) if request is not None else _current_ip.get(),
        data=data,
    )
