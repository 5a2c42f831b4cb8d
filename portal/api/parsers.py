"""JSON bodies the rest of the portal can store and echo: text that UTF-8 and PostgreSQL can hold, or a 400.

JSON lets a string spell a lone UTF-16 surrogate (`"\\ud800"`). Python decodes it into a str that cannot be
encoded as UTF-8, so the first thing to write it out (the database, a job file, or the error message quoting it)
raised and the caller got a 500 HTML page. PostgreSQL's jsonb refuses U+0000 the same way. Such text is never
meaningful input, so the whole body is checked once, here, and refused with the path of the first bad string.
"""

from __future__ import annotations

from typing import Any

from rest_framework import parsers, renderers


def unstorable_text(value: Any, path: str = "") -> tuple[str, str] | None:
    """(path, what is wrong) of the first string (key or value) in `value` no UTF-8 text or database can hold."""
    if isinstance(value, str):
        problem = _problem(value)
        return (path, problem) if problem else None
    if isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            problem = _problem(key) if isinstance(key, str) else None
            if problem:
                return (path or "(a key)", f"a key {problem}")
            found = unstorable_text(item, where)
            if found:
                return found
    if isinstance(value, list):
        for index, item in enumerate(value):
            found = unstorable_text(item, f"{path}[{index}]")
            if found:
                return found
    return None


def _problem(text: str) -> str | None:
    if "\x00" in text:
        return "contains a NUL character (U+0000)"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"contains a lone UTF-16 surrogate (U+{ord(text[exc.start]):04X}), which is not a character"
    return None


def refuse_unstorable(value: Any, path: str = "") -> None:
    from portal.api.errors import ApiError  # here: errors imports the actions, which import the serializers

    found = unstorable_text(value, path)
    if found:
        where, problem = found
        raise ApiError(f"{where}: {problem}" if where else problem, code="invalid_text", field=where or None)


class JSONParser(parsers.JSONParser):
    """DRF's JSON parser, refusing text that could not be stored or shown (see the module's docstring)."""

    def parse(self, stream, media_type=None, parser_context=None):
        data = super().parse(stream, media_type, parser_context)
        refuse_unstorable(data)
        return data


class JSONRenderer(renderers.JSONRenderer):
    """DRF's renderer, falling back to \\u escapes when a string cannot be UTF-8: an answer is never a 500."""

    def render(self, data, accepted_media_type=None, renderer_context=None):
        try:
            return super().render(data, accepted_media_type, renderer_context)
        except UnicodeEncodeError:
            self.ensure_ascii = True
            return super().render(data, accepted_media_type, renderer_context)
