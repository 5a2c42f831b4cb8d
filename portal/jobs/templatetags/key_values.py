"""{{ mapping|key_values }}: `LR=0.1 BATCH=32` instead of Python's `{'LR': 0.1, 'BATCH': 32}`, the way the
researcher typed them (`--sweep LR=0.1,0.01`, `-p lr=0.01`); a list of values is comma-joined."""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from typing import Any

from django import template

register = template.Library()


def _value(value: Any) -> str:
    if isinstance(value, list | tuple):
        return ",".join(_value(v) for v in value)
    if isinstance(value, str):
        return shlex.quote(value) if value else "''"
    return json.dumps(value, ensure_ascii=False)


def key_values_text(mapping: Mapping[str, Any] | None) -> str:
    if not mapping:
        return ""
    if not isinstance(mapping, Mapping):
        return str(mapping)
    return " ".join(f"{key}={_value(value)}" for key, value in mapping.items())


@register.filter
def key_values(mapping) -> str:
    return key_values_text(mapping)


@register.filter
def lookup(mapping: Mapping, key: Any) -> Any:
    """mapping[key], or "" (a template reads a dict by a key it has in a variable)."""
    return mapping.get(key, "") if isinstance(mapping, Mapping) else ""
