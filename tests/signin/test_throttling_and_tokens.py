"""Sign-in can't be guessed at speed; automation keeps its tokens, and loses them the moment its account is disabled."""

from __future__ import annotations

import pytest
from django.core.cache import cache

from portal.api.tokens import issue_token
from portal.audit.models import AuditEntry

pytestmark = pytest.mark.django_db
PASSWORD = "pw-for-tests-123"


@pytest.fixture(autouse=True)
def _fresh_rate_limits():
    cache.clear()  # the counters live in this run's cache (Redis, its own key prefix)
    yield
    cache.clear()


def _login(client, login: str, password: str, addr: str = "198.51.100.7"):
    return client.post("/accounts/login/", {"login": login, "password": password}, REMOTE_ADDR=addr)


def test_after_five_wrong_passwords_the_account_is_locked_for_a_while_even_with_the_right_one(client, make_user):
    make_user("alice")
    for _ in range(5):
        response = _login(client, "alice", "guess")
        assert response.status_code == 200 and "not correct" in response.content.decode()
    response = _login(client, "alice", PASSWORD)
    assert "Too many failed login attempts" in response.content.decode(), response.status_code
    assert "_auth_user_id" not in client.session
    failed = AuditEntry.objects.filter(action="auth.login_failed", data__login="alice")
    assert failed.count() >= 5 and set(failed.values_list("ip", flat=True)) == {"198.51.100.7"}


def test_one_address_trying_many_accounts_is_slowed_down(client, make_user):
    for n in range(11):
        make_user(f"user{n}")
    answers = [_login(client, f"user{n}", "guess", addr="203.0.113.9") for n in range(11)]
    assert all(r.status_code == 200 for r in answers[:10])
    last = answers[10]
    assert "Too many failed login attempts" in last.content.decode(), last.status_code
    # Another address is not affected.
    assert _login(client, "user0", PASSWORD, addr="192.0.2.1").status_code == 302


def test_api_tokens_work_until_a_site_admin_disables_the_account_and_then_stop_at_once(client, make_user):
    alice = make_user("alice")
    root = make_user("root", staff=True)
    root.is_superuser = True
    root.save()
    _, secret = issue_token(alice, name="nightly", scopes=["read"])
    bearer = {"HTTP_AUTHORIZATION": f"Bearer {secret}"}
    assert client.get("/api/v1/me/", **bearer).status_code == 200

    admin = client.__class__()
    admin.force_login(root)
    form = admin.get(f"/admin/auth/user/{alice.pk}/change/")
    assert form.status_code == 200
    response = admin.post(f"/admin/auth/user/{alice.pk}/change/", {
        "username": "alice", "email": alice.email, "first_name": "", "last_name": "",
        "is_staff": "", "is_superuser": "", "is_active": "",  # unticked: disabled
        "last_login_0": "", "last_login_1": "", "date_joined_0": "2026-01-01", "date_joined_1": "00:00:00",
        "initial-date_joined_0": "2026-01-01", "initial-date_joined_1": "00:00:00",
    }, REMOTE_ADDR="192.0.2.50")
    assert response.status_code == 302, response.content.decode()[:3000]

    refused = client.get("/api/v1/me/", **bearer)
    assert refused.status_code == 401 and refused.json()["code"] == "account_disabled"
    change = AuditEntry.objects.get(action="admin.change", data__object="alice")
    assert change.actor.username == "root" and change.ip == "192.0.2.50" and "Active" in change.data["change"]
