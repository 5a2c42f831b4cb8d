"""The API's pages: `limit` and `offset`, as DRF's LimitOffsetPagination, within what a page and the database hold.

Found by the hostile walk (tests/security/test_hostile_every_field.py): `?offset=99999999999999999999` reached
PostgreSQL as an OFFSET beyond bigint and answered 500. A page holds at most MAX_LIMIT rows (a larger `limit` gets
MAX_LIMIT, as DRF does with max_limit), and an offset past any real list is an empty page.

The lists answer `{count, next, previous, results}`; a list inside another answer (a sweep's jobs) is paged the
same way by `page_of`, its `next`/`previous` links beside it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from drf_spectacular.utils import OpenApiParameter
from rest_framework.pagination import LimitOffsetPagination

MAX_LIMIT = 1000
MAX_OFFSET = 2**62  # far past any list, and inside PostgreSQL's bigint


class Pages(LimitOffsetPagination):
    max_limit = MAX_LIMIT

    def get_offset(self, request) -> int:  # noqa: ANN001 - DRF's signature
        return min(super().get_offset(request), MAX_OFFSET)


@dataclass
class Page:
    items: list[Any]
    count: int  # the whole list's
    next: str | None  # GET it for the page after this one; None on the last
    previous: str | None


def page_of(request, rows, *, path: str, default_limit: int | None = None) -> Page:
    """A page of `rows` (a queryset: one COUNT and one slice) by the request's `limit` and `offset`, as the lists
    page theirs. Its links are to `path` (what GET lists these rows), whatever the request was: a submit or a cancel
    answers with the first page of what GET `path` pages on."""
    pages = Pages()
    if default_limit is not None:
        pages.default_limit = default_limit
    items = pages.paginate_queryset(rows, request)
    here = urlsplit(request.build_absolute_uri(path))

    def moved(link: str | None) -> str | None:
        return None if link is None else urlunsplit(here._replace(query=urlsplit(link).query))

    return Page(items, pages.count, moved(pages.get_next_link()), moved(pages.get_previous_link()))


def page_parameters(default_limit: int) -> list[OpenApiParameter]:
    """`limit` and `offset` as the schema documents them for a list inside an answer (the lists get them from DRF)."""
    return [
        OpenApiParameter("limit", int, description=f"Number of results to return per page (default {default_limit}, "
                                                    f"at most {MAX_LIMIT})."),
        OpenApiParameter("offset", int, description="The initial index from which to return the results."),
    ]
