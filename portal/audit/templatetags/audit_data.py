"""{{ value|audit_value }}: an audit entry's data as a person reads it, not as Python prints it.

`added ['a100']` is shown `added a100`, `before {'in_use': True, 'unused': []}` is shown
`before in_use = yes, unused = none`: lists are comma-separated, a mapping is `key = value` pairs (a mapping inside
a list or a mapping in parentheses), yes/no for booleans, "none" for an empty list or mapping, "—" for null."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django import template

register = template.Library()


def audit_text(value: Any, nested: bool = False) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, Mapping):
        if not value:
            return "none"
        text = ", ".join(f"{key} = {audit_text(item, nested=True)}" for key, item in value.items())
        return f"({text})" if nested else text
    if isinstance(value, list | tuple | set | frozenset):
        if not value:
            return "none"
        items = sorted(value, key=str) if isinstance(value, set | frozenset) else value
        return ", ".join(audit_text(item, nested=True) for item in items)
    return str(value)


@register.filter
def audit_value(value) -> str:
    return audit_text(value)
