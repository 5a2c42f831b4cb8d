"""The security tests speak to the API as the API tests do: the same token and client helpers."""

from tests.api.conftest import Api, api_as, issue, media_root  # noqa: F401 - fixtures shared with tests/api

__all__ = ["Api"]
