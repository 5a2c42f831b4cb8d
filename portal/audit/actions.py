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

from django.db import connection, models
from django.utils import timezone

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


def record_each_sql(action: str, *, source: str, target: type[models.Model], actor=None, project=None,
                    **data: Any) -> tuple[str, list[Any]]:
    """`record` for each row a data-modifying CTE named `source` returns (its `id` the target's pk): the INSERT
    for a caller that writes the change and its audit row in one statement (a submit: docs/decisions/0024)."""
    quote = connection.ops.quote_name
    columns = ", ".join(quote(AuditEntry._meta.get_field(name).column) for name in
                        ("created_at", "actor", "action", "project", "target_type", "target_id", "ip", "data"))
    data_field = AuditEntry._meta.get_field("data")
    params = [timezone.now(), actor.pk if getattr(actor, "is_authenticated", False) else None, action,
              getattr(project, "pk", None), target._meta.label_lower, _current_ip.get(),
              data_field.get_db_prep_save(data, connection)]
    # `source` and the identifiers are the caller's and the model's; every value is a bound parameter.
    sql = (f"INSERT INTO {quote(AuditEntry._meta.db_table)} ({columns}) "  # noqa: S608
           f"SELECT %s, %s, %s, %s, %s, {source}.id::text, %s, %s FROM {source}")
    return sql, params
