"""The hub integration is off unless configured, refuses a half configuration at start, and its pieces in the portal
(the way in from the hub, the sign-in button, the admin's mappings) behave without a hub running."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from portal.env import EnvError, env_url
from tests.conftest import ROOT

pytestmark = pytest.mark.django_db

HUB = {"KAKEHASHI_HUB_URL": "https://hub.example", "KAKEHASHI_HUB_API_TOKEN": "service-token",
       "KAKEHASHI_HUB_CALLBACK_URL": "https://portal.example/accounts/jupyterhub/login/callback/"}


@pytest.fixture
def hub_configured(settings):
    settings.KAKEHASHI_HUB_URL = HUB["KAKEHASHI_HUB_URL"]
    settings.KAKEHASHI_HUB_API_URL = HUB["KAKEHASHI_HUB_URL"] + "/hub/api"
    settings.KAKEHASHI_HUB_CLIENT_SECRET = settings.KAKEHASHI_HUB_API_TOKEN = HUB["KAKEHASHI_HUB_API_TOKEN"]
    settings.KAKEHASHI_HUB_CALLBACK_URL = HUB["KAKEHASHI_HUB_CALLBACK_URL"]
    return settings


def _settings_of(**env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("KAKEHASHI_", "DJANGO_SETTINGS_MODULE"))}
    return subprocess.run(
        [sys.executable, "-c", "import portal.settings as s; print(s.KAKEHASHI_HUB_URL, s.KAKEHASHI_HUB_API_URL, "
                               "s.KAKEHASHI_HUB_CLIENT_ID, s.KAKEHASHI_HUB_CLIENT_SECRET)"],
        cwd=ROOT, env={**clean, **env}, capture_output=True, text=True)


def test_without_configuration_the_portal_knows_no_hub(client, local_site):
    assert _settings_of().stdout.split() == ["service-kakehashi"]  # URL, API URL and secret are empty
    assert client.get("/services/kakehashi/").status_code == 404
    assert client.get("/accounts/jupyterhub/login/").status_code == 404
    assert client.get("/accounts/jupyterhub/login/callback/?code=x&state=y").status_code == 404  # was a 500
    refused = client.get("/api/v1/me/", headers={"Authorization": "token 0123456789abcdef"})
    assert refused.status_code == 401 and refused.json()["code"] == "hub_not_configured"
    assert "JupyterHub" not in client.get("/accounts/login/").content.decode()


def test_configured_from_the_environment_the_api_url_and_oauth_client_follow_the_hub():
    loaded = _settings_of(**HUB)
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.split() == ["https://hub.example", "https://hub.example/hub/api", "service-kakehashi",
                                     "service-token"]


@pytest.mark.parametrize("missing", ["KAKEHASHI_HUB_API_TOKEN", "KAKEHASHI_HUB_CALLBACK_URL"])
def test_a_hub_url_without_the_service_token_or_the_callback_stops_the_portal_at_start(missing):
    loaded = _settings_of(**{k: v for k, v in HUB.items() if k != missing})
    assert loaded.returncode != 0 and missing in loaded.stderr


def test_a_hub_url_must_be_an_http_url(monkeypatch):
    monkeypatch.setenv("KAKEHASHI_HUB_URL", "hub.example:8000")
    with pytest.raises(EnvError, match="KAKEHASHI_HUB_URL='hub.example:8000' is not an http"):
        env_url("KAKEHASHI_HUB_URL")
    monkeypatch.setenv("KAKEHASHI_HUB_URL", " https://hub.example/ ")
    assert env_url("KAKEHASHI_HUB_URL") == "https://hub.example/"


def test_the_login_page_offers_the_hub_when_one_is_configured(client, hub_configured):
    page = client.get("/accounts/login/").content.decode()
    assert "JupyterHub" in page and "/accounts/jupyterhub/login/" in page


@pytest.mark.parametrize(("path", "next_path"), [
    ("/services/kakehashi/", "/"),
    ("/services/kakehashi/jobs/5/", "/jobs/5/"),
    ("/services/kakehashi/jobs/?state=running", "/jobs/?state=running"),
    ("/services/kakehashi//evil.example/", "/"),
])
def test_the_way_in_from_the_hub_signs_in_on_the_portals_own_address_then_shows_the_page(client, hub_configured,
                                                                                       path, next_path):
    from urllib.parse import urlencode

    answer = client.get(path)
    assert answer.status_code == 302
    assert answer["Location"] == "https://portal.example/accounts/jupyterhub/login/?" + urlencode({"next": next_path})
    assert client.get("/services/another-service/").status_code == 404


def test_the_portals_sign_in_starts_the_hubs_oauth_with_its_registered_callback(client, hub_configured):
    from urllib.parse import parse_qs, urlsplit

    answer = client.get("/accounts/jupyterhub/login/?next=/jobs/")
    assert answer.status_code == 302
    target = urlsplit(answer["Location"])
    assert f"{target.scheme}://{target.netloc}{target.path}" == "https://hub.example/hub/api/oauth2/authorize"
    query = parse_qs(target.query)
    assert query["client_id"] == ["service-kakehashi"] and query["response_type"] == ["code"]
    assert query["redirect_uri"] == [HUB["KAKEHASHI_HUB_CALLBACK_URL"]]
    assert "scope" not in query  # the hub's default: identify the user, nothing more
    assert query["state"][0]


def test_site_admins_map_hub_users_to_accounts_in_the_django_admin(client, local_site, django_user_model):
    from portal.hub.models import HubUserMapping

    client.force_login(django_user_model.objects.create_superuser("root", "root@example.org", "pw-for-tests-123"))
    root = client.get("/admin/").content.decode()
    assert "Hub user mappings" in root
    added = client.post("/admin/hub/hubusermapping/add/", {"hub_username": "a.smith", "user": local_site.alice.pk,
                                                          "note": "university directory name"})
    assert added.status_code == 302, added.content.decode()[:2000]
    assert HubUserMapping.objects.get().user == local_site.alice
    again = client.post("/admin/hub/hubusermapping/add/", {"hub_username": "a.smith", "user": local_site.mallory.pk})
    assert "Hub user mapping with this Hub username already exists" in again.content.decode()
