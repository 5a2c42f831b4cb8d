"""Property-based: requests generated from the OpenAPI schema, run in-process against the WSGI app with a valid
token, never get a server error, and every answer matches what the schema documents (status, content type, body).
"""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from portal.api.tokens import issue_token
from portal.wsgi import application

pytestmark = pytest.mark.django_db

# Loaded when the module is collected (the schema needs no database). schemathesis' fixture-based loader does
# not work with this pytest version, and this is the plainer form anyway.
schema = schemathesis.openapi.from_wsgi("/api/schema/", application)


@pytest.fixture
def token(local_site, settings) -> str:
    from django.core.signals import request_finished, request_started
    from django.db import close_old_connections

    settings.KAKEHASHI_API_RATE = "100000/min"  # the generator sends many requests with one token
    # As Django's test client does: otherwise the WSGI handler closes the test's database connection (and with it
    # the transaction holding this test's data) at the end of every request.
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield issue_token(local_site.alice, name="schemathesis", scopes=["read", "submit"])[1]
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@schema.parametrize()
@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.filter_too_much])
def test_generated_requests_get_no_server_error(case, token):
    case.call_and_validate(
        headers={"Authorization": f"Bearer {token}"},
        checks=[not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance],
    )
