"""jupyterhub/jupyterhub_config.py, as the hub loads it: the portal as a service with its OAuth client, the roles and
scopes it needs, the pinned proxy, Lab without news pop-ups (the running hub of the other tests uses the same file)."""

from __future__ import annotations

import json

import pytest
from traitlets.config import Config

from tests.hub.conftest import HUB_DIR

CONFIG = HUB_DIR / "jupyterhub_config.py"
ENV = {
    "KAKEHASHI_HUB_API_TOKEN": "a-service-token",
    "KAKEHASHI_HUB_CALLBACK_URL": "https://portal.example/accounts/jupyterhub/login/callback/",
    "KAKEHASHI_PORTAL_URL": "http://web:8000/",
    "KAKEHASHI_HUB_SHARED_PASSWORD": "hub-password",
    "KAKEHASHI_HUB_USERS": "alice, bob",
}


def load(monkeypatch, tmp_path, **env: str) -> Config:
    for name in [*ENV, "KAKEHASHI_HUB_SERVICE_NAME", "KAKEHASHI_HUB_AUTHENTICATOR"]:
        monkeypatch.delenv(name, raising=False)
    for name, value in {**ENV, "KAKEHASHI_HUB_STATE_DIR": str(tmp_path), **env}.items():
        if value is not None:
            monkeypatch.setenv(name, value)
    config = Config()
    exec(compile(CONFIG.read_text(), str(CONFIG), "exec"), {"get_config": lambda: config, "__file__": str(CONFIG)})
    return config


def test_the_portal_is_a_service_and_the_oauth_client_that_signs_hub_users_in(monkeypatch, tmp_path):
    c = load(monkeypatch, tmp_path)
    [service] = c.JupyterHub.services
    assert service == {
        "name": "kakehashi", "url": "http://web:8000", "api_token": "a-service-token",
        "oauth_client_id": "service-kakehashi",
        "oauth_redirect_uri": "https://portal.example/accounts/jupyterhub/login/callback/",
        "oauth_no_confirm": True, "display": True,
        "info": {"description": "Kakehashi: run notebooks and jobs on the cluster and the cloud"},
    }


def test_users_may_reach_the_portal_and_the_portal_may_read_users(monkeypatch, tmp_path):
    c = load(monkeypatch, tmp_path)
    roles = {role["name"]: role for role in c.JupyterHub.load_roles}
    assert "access:services!service=kakehashi" in roles["user"]["scopes"] and "self" in roles["user"]["scopes"]
    assert roles["kakehashi-service"]["services"] == ["kakehashi"]
    assert set(roles["kakehashi-service"]["scopes"]) == {"list:users", "read:users"}
    # The token each Lab server holds may reach the portal too (the portal refuses tokens without this scope).
    assert "access:services!service=kakehashi" in c.Spawner.server_token_scopes
    assert c.Spawner.environment == {"KAKEHASHI_PORTAL_URL": "http://web:8000", "KAKEHASHI_HUB_SERVICE_NAME": "kakehashi"}


def test_another_service_name_is_used_everywhere(monkeypatch, tmp_path):
    c = load(monkeypatch, tmp_path, KAKEHASHI_HUB_SERVICE_NAME="portal")
    assert c.JupyterHub.services[0]["name"] == "portal" and c.JupyterHub.services[0]["oauth_client_id"] == "service-portal"
    assert "access:services!service=portal" in c.JupyterHub.load_roles[0]["scopes"]
    assert c.Spawner.environment["KAKEHASHI_HUB_SERVICE_NAME"] == "portal"


def test_the_proxy_is_the_pinned_one_and_lab_starts_without_news_or_update_popups(monkeypatch, tmp_path):
    c = load(monkeypatch, tmp_path)
    assert c.ConfigurableHTTPProxy.command == [str(HUB_DIR / "node_modules/.bin/configurable-http-proxy")]
    assert c.ConfigurableHTTPProxy.pid_file == str(tmp_path / "proxy.pid")
    settings_dir = HUB_DIR / "lab-settings"
    assert f"--LabApp.app_settings_dir={settings_dir}" in c.Spawner.args
    overrides = json.loads((settings_dir / "overrides.json").read_text())
    assert overrides["@jupyterlab/apputils-extension:notification"] == {"checkForUpdates": False, "fetchNews": "false"}
    assert c.Authenticator.allowed_users == {"alice", "bob"}


@pytest.mark.parametrize("missing", ["KAKEHASHI_HUB_API_TOKEN", "KAKEHASHI_HUB_CALLBACK_URL", "KAKEHASHI_PORTAL_URL",
                                     "KAKEHASHI_HUB_SHARED_PASSWORD"])
def test_the_hub_refuses_to_start_without_what_it_needs_and_names_it(monkeypatch, tmp_path, missing):
    with pytest.raises(SystemExit, match=missing):
        load(monkeypatch, tmp_path, **{missing: None})


def test_a_url_that_is_not_http_is_refused(monkeypatch, tmp_path):
    with pytest.raises(SystemExit, match="KAKEHASHI_PORTAL_URL='web:8000' is not an http"):
        load(monkeypatch, tmp_path, KAKEHASHI_PORTAL_URL="web:8000")
