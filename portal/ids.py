"""Object ids typed into forms and query strings: a number, or no object at all.

Found by the hostile walk (tests/security/test_hostile_every_field.py): `get_object_or_404(..., pk="$(x)")` raises
ValueError, a 500. An id that is not a positive number names nothing, so it becomes 0, which no row has: the view
answers as for any id that does not exist (404, or nothing chosen).
"""

from __future__ import annotations

MAX_ID = 2**63 - 1  # PostgreSQL's bigint: a larger number would be an error in the query, not a missing row


def id_or_zero(raw: object) -> int:
    text = str(raw or "").strip()
    if not text.isascii() or not text.isdigit():
        return 0
    number = int(text)
    return number if number <= MAX_ID else 0
