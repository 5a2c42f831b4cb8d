"""The API as a whole: rate limits, the JSON error shape everywhere, the schema and its docs page."""

from __future__ import annotations

import re
import time

import pytest
import yaml
from django.contrib.staticfiles import finders

pytestmark = pytest.mark.django_db


def test_each_token_is_rate_limited_with_a_429_and_retry_after(local_site, api_as, settings):
    settings.KAKEHASHI_API_RATE = "3/min"
    busy = api_as(local_site.alice, "read")
    statuses = [busy.get("/api/v1/projects/").status_code for _ in range(4)]
    assert statuses == [200, 200, 200, 429]
    refused = busy.get("/api/v1/projects/")
    assert refused.json()["code"] == "throttled" and "try again in" in refused.json()["detail"]
    assert int(refused["Retry-After"]) > 0
    # Another token of the same person has its own allowance.
    assert api_as(local_site.alice, "read").get("/api/v1/projects/").status_code == 200


def test_a_tokens_allowance_comes_back_when_its_window_closes(local_site, api_as, settings):
    settings.KAKEHASHI_API_RATE = "2/s"
    busy = api_as(local_site.alice, "read")
    assert [busy.get("/api/v1/projects/").status_code for _ in range(3)] == [200, 200, 429]
    time.sleep(2.1)  # Redis counts in whole seconds: the window closes within two
    assert busy.get("/api/v1/projects/").status_code == 200


def test_a_rate_limit_list_left_in_the_cache_by_the_earlier_throttle_does_not_break_requests(local_site, api_as):
    # Before the window counter, DRF kept a pickled list of request times under the throttle's key; after an
    # upgrade it may still be there for a minute.
    from django.core.cache import cache

    from portal.api.models import ApiToken

    busy = api_as(local_site.alice, "read")
    token = ApiToken.objects.filter(user=local_site.alice).latest("pk")
    cache.set(f"throttle_token_token-{token.pk}", [time.time()] * 3, 60)
    assert busy.get("/api/v1/projects/").status_code == 200


def test_without_redis_the_local_cache_counts_the_same_allowance(local_site, api_as, settings):
    # `make run` has no Redis: its one web process counts in local memory.
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    settings.KAKEHASHI_API_RATE = "3/min"
    busy = api_as(local_site.alice, "read")
    assert [busy.get("/api/v1/projects/").status_code for _ in range(4)] == [200, 200, 200, 429]
    assert 0 < int(busy.get("/api/v1/projects/")["Retry-After"]) <= 60


def test_a_browser_session_is_limited_per_user(client, local_site, settings):
    settings.KAKEHASHI_API_RATE = "2/min"
    client.force_login(local_site.alice)
    assert [client.get("/api/v1/projects/").status_code for _ in range(3)] == [200, 200, 429]


def test_unknown_api_urls_answer_json_and_point_at_the_slash(alice_api):
    missing = alice_api.get("/api/v1/nothing-here/")
    assert missing.status_code == 404 and missing.json()["code"] == "not_found" and "/api/docs/" in missing.json()["detail"]
    no_slash = alice_api.get("/api/v1/jobs")
    assert no_slash.status_code == 404 and "use /api/v1/jobs/" in no_slash.json()["detail"]


def test_the_schema_is_openapi_3_with_the_bearer_scheme_and_the_402_explained(client):
    response = client.get("/api/schema/")
    assert response.status_code == 200
    schema = yaml.safe_load(response.content)
    assert schema["openapi"].startswith("3.")
    assert schema["components"]["securitySchemes"]["bearerAuth"] == {
        "type": "http", "scheme": "bearer", "bearerFormat": "kh_<43 characters>"}
    assert "402 Payment Required" in schema["info"]["description"]
    paths = schema["paths"]
    for path in ["/api/v1/projects/", "/api/v1/clusters/", "/api/v1/hardware/", "/api/v1/software/", "/api/v1/jobs/",
                 "/api/v1/jobs/{id}/", "/api/v1/jobs/{id}/cancel/", "/api/v1/jobs/{id}/logs/",
                 "/api/v1/projects/{slug}/budget/", "/api/v1/projects/{slug}/files/",
                 "/api/v1/projects/{slug}/files/{id}/download/", "/api/v1/sweeps/", "/api/v1/sweeps/{id}/"]:
        assert path in paths, path
    submit = paths["/api/v1/jobs/"]["post"]["responses"]
    assert {"200", "201", "400", "401", "402", "403", "404", "429"} <= set(submit)


def test_the_docs_page_uses_only_assets_served_by_the_portal(client):
    response = client.get("/api/docs/")
    assert response.status_code == 200
    page = response.content.decode()
    assert "/static/drf_spectacular_sidecar/swagger-ui-dist/" in page
    external = re.findall(r'(?:src|href)="(https?://[^"]+)"', page)
    assert external == [], external
    assert finders.find("drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js")


def test_api_errors_are_json_with_detail_and_code(client, alice_api):
    for response in (client.get("/api/v1/jobs/"), alice_api.get("/api/v1/jobs/12345/"),
                     alice_api.post("/api/v1/jobs/", [1, 2])):
        body = response.json()
        assert response["Content-Type"] == "application/json"
        assert body["detail"] and body["code"], body


def test_the_job_submit_endpoint_wants_json(alice_api):
    response = alice_api.client.post("/api/v1/jobs/", {"project": "vision"},
                                      headers={"Authorization": f"Bearer {alice_api.token}"})
    assert response.status_code == 415 and response.json()["code"] == "unsupported_media_type"


def test_a_bug_answers_json_500_and_is_logged(alice_api, monkeypatch, caplog):
    def broken(user):
        raise RuntimeError("a bug")

    monkeypatch.setattr("portal.api.queries.projects_with_role", broken)
    response = alice_api.get("/api/v1/projects/")
    assert response.status_code == 500
    assert response.json()["code"] == "server_error" and "a bug" not in response.json()["detail"]
    assert "a bug" in caplog.text
