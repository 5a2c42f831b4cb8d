"""The cloud room's tests (portal/cloud/) call the API as the API's tests do: its fixtures, shared."""

from tests.api.conftest import alice_api, api_as, issue, mallory_api, media_root  # noqa: F401

