"""Strict helpers for reading settings from the environment.

A typo in a production environment variable should stop the process at start-up with a message that names
the variable, not surface later as a confusing default.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


class EnvError(RuntimeError):
    pass


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool = False) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise EnvError(f"{name}={raw!r} is not a boolean (use 1/0, true/false, yes/no, on/off)")


def _env_number(name: str, default, parse, what: str):
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return parse(raw)
    except ValueError:
        raise EnvError(f"{name}={raw!r} is not {what}") from None


def env_int(name: str, default: int) -> int:
    return _env_number(name, default, int, "an integer")


def env_float(name: str, default: float) -> float:
    return _env_number(name, default, float, "a number")


def env_positive_int(name: str, default: int) -> int:
    """A whole number of 1 or more (a count or a limit, where 0 or less would silently mean "nothing")."""
    value = env_int(name, default)
    if value < 1:
        raise EnvError(f"{name}={os.environ.get(name)!r} must be 1 or more")
    return value


def env_list(name: str, default: list[str] | None = None) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return list(default or [])
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_url(name: str, default: str = "") -> str:
    """An http(s) URL as written (callers strip a trailing slash where they join paths), or "" when unset."""
    raw = os.environ.get(name)
    value = (default if raw is None else raw).strip()
    if not value:
        return ""
    parts = urlsplit(value)
    if parts.scheme not in {"http", "https"} or not parts.netloc or parts.query or parts.fragment:
        raise EnvError(f"{name}={value!r} is not an http:// or https:// URL (scheme, host and optional path only)")
    return value


def env_choices(name: str, allowed: set[str], default: list[str] | None = None) -> list[str]:
    """A comma-separated list whose every item must be one of `allowed` (a typo stops start-up, naming it)."""
    values = env_list(name, default)
    unknown = [v for v in values if v not in allowed]
    if unknown:
        raise EnvError(f"{name}: unknown value(s) {', '.join(map(repr, unknown))}; use any of {', '.join(sorted(allowed))}")
    return values
