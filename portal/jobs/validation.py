"""Turning what a person typed into job fields, with messages that say what to change."""

from __future__ import annotations

import re

from django.core.exceptions import ValidationError

_HMS = re.compile(r"^(?:(\d+)-)?(\d{1,4}):(\d{1,2})(?::(\d{1,2}))?$")
_UNITS = re.compile(r"(\d+(?:\.\d+)?)\s*([dhms])", re.I)
_UNIT_SECONDS = {"d": 86400, "h": 3600, "m": 60, "s": 1}


def parse_walltime(text: str | int) -> int:
    """Seconds from "HH:MM:SS", "HH:MM", "D-HH:MM:SS", "2h", "90m", "1d12h" or a number of seconds."""
    if isinstance(text, int) and not isinstance(text, bool):
        seconds = text
    else:
        raw = str(text).strip()
        match = _HMS.match(raw)
        if match:
            days, hours, minutes, secs = match.groups()
            if int(minutes) >= 60 or (secs and int(secs) >= 60):
                raise ValidationError(f"walltime {raw!r}: minutes and seconds must be below 60")
            seconds = int(days or 0) * 86400 + int(hours) * 3600 + int(minutes) * 60 + int(secs or 0)
        elif raw.isdigit():
            seconds = int(raw)
        elif raw and _UNITS.sub("", raw).strip() == "" and _UNITS.search(raw):
            seconds = int(sum(float(n) * _UNIT_SECONDS[u.lower()] for n, u in _UNITS.findall(raw)))
        else:
            raise ValidationError(
                f"walltime {raw!r} is not a duration: write HH:MM:SS (e.g. 01:30:00) or 90m, 2h, 1d"
            )
    if seconds <= 0:
        raise ValidationError("walltime must be longer than zero")
    return seconds


def format_walltime(seconds: int) -> str:
    hours, rest = divmod(int(seconds), 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}"
