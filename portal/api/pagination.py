"""The API's pages: `limit` and `offset`, as DRF's LimitOffsetPagination, within what a page and the database hold.

Found by the hostile walk (tests/security/test_hostile_every_field.py): `?offset=99999999999999999999` reached
PostgreSQL as an OFFSET beyond bigint and answered 500. A page holds at most MAX_LIMIT rows (a larger `limit` gets
MAX_LIMIT, as DRF does with max_limit), and an offset past any real list is an empty page.
"""

from __future__ import annotations

from rest_framework.pagination import LimitOffsetPagination

MAX_LIMIT = 1000
MAX_OFFSET = 2**62  # far past any list, and inside PostgreSQL's bigint


class Pages(LimitOffsetPagination):
    max_limit = MAX_LIMIT

    def get_offset(self, request) -> int:  # noqa: ANN001 - DRF's signature
        return min(super().get_offset(request), MAX_OFFSET)
