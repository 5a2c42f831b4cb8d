"""API tokens: how they authenticate, how they are refused, how they are stored, issued and revoked."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.utils import timezone

from portal.api import tokens
from portal.api.models import ApiToken
from portal.crypto import token_digest

pytestmark = pytest.mark.django_db

ME = "/api/v1/me/"


def _get(client, token: str | None = None, header: str | None = None, path: str = ME):
    headers = {}
    if header is not None:
        headers["Authorization"] = header
    elif token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return client.get(path, headers=headers)


def test_a_valid_token_authenticates_as_its_user(client, local_site, issue):
    secret = issue(local_site.alice, "read", name="laptop")
    response = _get(client, secret)
    assert response.status_code == 200
    assert response.json()["username"] == "alice"
    assert response.json()["token"]["name"] == "laptop" and response.json()["token"]["scopes"] == ["read"]


def test_tokens_look_like_kh_and_43_urlsafe_characters(local_site, issue):
    secret = issue(local_site.alice)
    assert secret.startswith("kh_") and len(secret) == 46
    assert set(secret[3:]) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def test_no_token_is_401_with_a_hint_and_a_bearer_challenge(client, local_site):
    response = _get(client)
    assert response.status_code == 401
    assert response.json()["code"] == "not_authenticated" and "Bearer" in response.json()["detail"]
    assert response["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.parametrize(
    ("header", "code"),
    [
        ("Bearer", "token_malformed"),
        ("Bearer a b", "token_malformed"),
        ("Bearer not-a-kakehashi-token", "token_malformed"),
        ("Bearer kh_" + "x" * 10, "token_malformed"),
        ("Bearer kh_" + "A" * 43, "token_unknown"),
    ],
)
def test_malformed_and_unknown_tokens_are_401(client, local_site, header, code):
    response = _get(client, header=header)
    assert response.status_code == 401, response.content
    assert response.json()["code"] == code and "token" in response.json()["detail"]


def test_an_expired_token_is_401_and_says_when_it_expired(client, local_site):
    token, secret = tokens.issue_token(local_site.alice, name="old", scopes=["read"],
                                       expires_at=timezone.now() + timedelta(seconds=30))
    ApiToken.objects.filter(pk=token.pk).update(expires_at=timezone.now() - timedelta(days=1))
    response = _get(client, secret)
    assert response.status_code == 401
    assert response.json()["code"] == "token_expired"
    assert "'old'" in response.json()["detail"] and "expired on" in response.json()["detail"]


def test_a_revoked_token_is_401(client, local_site):
    token, secret = tokens.issue_token(local_site.alice, name="ci", scopes=["read"])
    assert _get(client, secret).status_code == 200
    tokens.revoke_token(token, actor=local_site.alice)
    response = _get(client, secret)
    assert response.status_code == 401 and response.json()["code"] == "token_revoked"


def test_a_disabled_account_cannot_use_its_tokens(client, local_site, issue):
    secret = issue(local_site.alice)
    local_site.alice.is_active = False
    local_site.alice.save()
    response = _get(client, secret)
    assert response.status_code == 401 and response.json()["code"] == "account_disabled"


def test_the_database_never_holds_the_secret(local_site):
    token, secret = tokens.issue_token(local_site.alice, name="db-check", scopes=["read", "submit"])
    assert token.digest == token_digest(secret) and secret not in token.digest
    assert token.prefix == secret[:11]
    # Search every column of the row, and the audit trail, for the secret or its random part.
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM api_apitoken WHERE id = %s", [token.pk])
        row = " ".join(str(value) for value in cursor.fetchone())
        cursor.execute("SELECT data::text FROM audit_auditentry")
        audit = " ".join(r[0] for r in cursor.fetchall())
    for text in (row, audit):
        assert secret not in text and secret[11:] not in text


def test_use_is_recorded_at_most_once_a_minute(client, local_site, issue):
    secret = issue(local_site.alice)
    token = ApiToken.objects.get(digest=token_digest(secret))
    assert token.last_used_at is None
    _get(client, secret)
    token.refresh_from_db()
    first = token.last_used_at
    assert first is not None and token.last_used_ip == "127.0.0.1"
    _get(client, secret)
    token.refresh_from_db()
    assert token.last_used_at == first  # not written again within the minute
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=first - timedelta(minutes=5))
    _get(client, secret)
    token.refresh_from_db()
    assert token.last_used_at > first - timedelta(minutes=5)
    # A new address is noted at once.
    client.get(ME, headers={"Authorization": f"Bearer {secret}"}, REMOTE_ADDR="10.1.2.3")
    token.refresh_from_db()
    assert token.last_used_ip == "10.1.2.3"


@pytest.mark.parametrize(
    ("scopes", "method", "path", "allowed"),
    [
        (["read"], "get", "/api/v1/projects/", True),
        (["submit"], "get", "/api/v1/projects/", False),
        (["read"], "post", "/api/v1/jobs/", False),
        (["admin"], "get", "/api/v1/projects/", True),
        (["submit"], "get", "/api/v1/me/", True),  # who am I: any valid token
    ],
)
def test_scopes_decide_what_a_token_may_do(client, local_site, issue, scopes, method, path, allowed):
    secret = issue(local_site.alice, *scopes)
    headers = {"Authorization": f"Bearer {secret}"}
    if method == "get":
        response = client.get(path, headers=headers)
    else:
        response = client.post(path, "{}", content_type="application/json", headers=headers)
    if allowed:
        assert response.status_code in (200, 400)
    else:
        assert response.status_code == 403 and response.json()["code"] == "insufficient_scope"


# ------------------------------------------------------------------------------------------ issue_token


def test_issue_token_prints_only_a_working_token(client, local_site):
    out = StringIO()
    call_command("issue_token", "alice", "--scope", "read", "--scope", "submit", "--expires", "30d", "--name", "sweeps",
                 stdout=out)
    secret = out.getvalue().strip()
    assert "\n" not in secret and secret.startswith("kh_")
    token = ApiToken.objects.get(digest=token_digest(secret))
    assert token.name == "sweeps" and token.scopes == ["read", "submit"] and token.user == local_site.alice
    assert timedelta(days=29) < token.expires_at - timezone.now() <= timedelta(days=30)
    assert _get(client, secret).status_code == 200


def test_issue_token_defaults_to_read_only_and_never_expiring(local_site):
    out = StringIO()
    call_command("issue_token", "alice", stdout=out)
    token = ApiToken.objects.get(digest=token_digest(out.getvalue().strip()))
    assert token.scopes == ["read"] and token.expires_at is None


def test_issue_token_takes_a_date_and_refuses_nonsense(local_site):
    out = StringIO()
    day = (timezone.localdate() + timedelta(days=10)).isoformat()
    call_command("issue_token", "alice", "--expires", day, stdout=out)
    token = ApiToken.objects.get(digest=token_digest(out.getvalue().strip()))
    assert timezone.localtime(token.expires_at).date().isoformat() > day  # valid through that whole day
    with pytest.raises(CommandError, match="no user"):
        call_command("issue_token", "nobody", stdout=StringIO())
    with pytest.raises(CommandError, match="in the past"):
        call_command("issue_token", "alice", "--expires", "2001-01-01", stdout=StringIO())
    with pytest.raises(CommandError, match="30d"):
        call_command("issue_token", "alice", "--expires", "soon", stdout=StringIO())


# ------------------------------------------------------------------------------------- the settings page


def test_the_settings_page_creates_shows_once_lists_and_revokes(client, local_site):
    client.force_login(local_site.alice)
    assert client.get("/settings/tokens/").status_code == 200
    response = client.post("/settings/tokens/", {"name": "workstation", "scopes": ["read", "submit"],
                                                 "expires_in_days": "7"})
    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    secret = response.context["new_secret"]
    assert secret in response.content.decode()
    token = ApiToken.objects.get(user=local_site.alice)
    assert token.digest == token_digest(secret) and token.scopes == ["read", "submit"]
    assert timedelta(days=6) < token.expires_at - timezone.now() <= timedelta(days=7)
    # Shown once: the list shows the prefix only.
    listing = client.get("/settings/tokens/").content.decode()
    assert secret not in listing and token.prefix in listing and "workstation" in listing
    assert client.post(f"/settings/tokens/{token.pk}/revoke/").status_code == 302
    token.refresh_from_db()
    assert token.revoked_at is not None and token.status == "revoked"


def test_the_settings_page_needs_a_login_and_a_scope(client, local_site):
    assert client.get("/settings/tokens/").status_code == 302
    client.force_login(local_site.alice)
    response = client.post("/settings/tokens/", {"name": "x"})
    assert response.status_code == 200 and response.context["new_secret"] is None
    assert ApiToken.objects.count() == 0


def test_nobody_revokes_someone_elses_token(client, local_site):
    token, _ = tokens.issue_token(local_site.alice, name="mine", scopes=["read"])
    client.force_login(local_site.mallory)
    assert client.post(f"/settings/tokens/{token.pk}/revoke/").status_code == 404
    token.refresh_from_db()
    assert token.revoked_at is None
