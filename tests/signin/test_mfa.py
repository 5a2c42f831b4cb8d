"""Two-factor sign-in (allauth.mfa): an authenticator app's codes, recovery codes, and the site's requirement."""

from __future__ import annotations

import re
import time

import pytest

from portal.api.tokens import issue_token
from portal.audit.models import AuditEntry
from portal.projects.models import Membership, Project, Role
from tests.signin.totp import totp

pytestmark = pytest.mark.django_db
PASSWORD = "pw-for-tests-123"


def _password_step(client, username: str):
    return client.post("/accounts/login/", {"login": username, "password": PASSWORD})


def _enrol_totp(client) -> str:
    """Settings → Two-factor → Authenticator app: read the secret, answer with the current code. Returns the secret."""
    page = client.get("/accounts/2fa/totp/activate/")
    if page.status_code == 302 and page["Location"].startswith("/accounts/reauthenticate/"):
        # Changing sign-in factors asks for the password again first.
        assert client.post(page["Location"], {"password": PASSWORD}).status_code == 302
        page = client.get("/accounts/2fa/totp/activate/")
    assert page.status_code == 200
    secret = re.search(r'id="authenticator_secret"[^>]*value="([A-Z2-7]+)"|value="([A-Z2-7]+)"[^>]*id="authenticator_secret"',
                       page.content.decode())
    secret = secret.group(1) or secret.group(2)
    done = client.post("/accounts/2fa/totp/activate/", {"code": totp(secret)})
    assert done.status_code == 302 and "reauthenticate" not in done["Location"], done["Location"]
    return secret


def _signed_in_as(client) -> str | None:
    response = client.get("/api/v1/me/")
    return response.json()["username"] if response.status_code == 200 else None


def _recovery_codes(client) -> list[str]:
    page = client.get("/accounts/2fa/recovery-codes/").content.decode()
    return re.findall(r"\b(\d{8})\b", page)


def test_a_user_enrols_an_authenticator_app_and_then_needs_its_code_to_sign_in(client, make_user,
                                                                              django_capture_on_commit_callbacks):
    make_user("alice")
    assert _password_step(client, "alice").status_code == 302
    with django_capture_on_commit_callbacks(execute=True):  # allauth announces the new factor after commit
        secret = _enrol_totp(client)
    added = AuditEntry.objects.get(action="mfa.add", actor__username="alice", data__type="totp")
    assert added.ip == "127.0.0.1"
    client.logout()

    second_step = _password_step(client, "alice")
    assert second_step.status_code == 302 and second_step["Location"] == "/accounts/2fa/authenticate/"
    assert _signed_in_as(client) is None  # the password alone signs no one in
    # The next step's code: the enrolment's own code may not be used twice.
    response = client.post("/accounts/2fa/authenticate/", {"code": totp(secret, at=time.time() + 30)})
    assert response.status_code == 302 and response["Location"] == "/"
    assert _signed_in_as(client) == "alice"


def test_a_wrong_code_is_refused(client, make_user):
    make_user("alice")
    _password_step(client, "alice")
    secret = _enrol_totp(client)
    client.logout()
    _password_step(client, "alice")
    wrong = f"{(int(totp(secret)) + 1) % 1_000_000:06d}"
    response = client.post("/accounts/2fa/authenticate/", {"code": wrong})
    assert response.status_code == 200 and "Incorrect code" in response.content.decode()
    assert _signed_in_as(client) is None


def test_a_recovery_code_signs_in_once(client, make_user):
    make_user("alice")
    _password_step(client, "alice")
    _enrol_totp(client)
    codes = _recovery_codes(client)
    assert len(codes) == 10
    client.logout()
    _password_step(client, "alice")
    assert client.post("/accounts/2fa/authenticate/", {"code": codes[0]}).status_code == 302
    assert _signed_in_as(client) == "alice"
    client.logout()
    _password_step(client, "alice")
    again = client.post("/accounts/2fa/authenticate/", {"code": codes[0]})
    assert again.status_code == 200 and "Incorrect code" in again.content.decode()
    assert _signed_in_as(client) is None


@pytest.fixture
def mfa_required(settings):
    settings.KAKEHASHI_MFA_REQUIRED_FOR = ["staff", "project-admins"]


def test_the_requirement_sends_a_site_admin_without_a_second_factor_to_set_one_up(client, make_user, mfa_required):
    make_user("root", staff=True)
    assert _password_step(client, "root").status_code == 302
    for path in ("/", "/jobs/", "/site/", "/admin/"):
        response = client.get(path)
        assert response.status_code == 302 and response["Location"] == "/accounts/2fa/", path
    page = client.get("/accounts/2fa/", follow=True).content.decode()
    assert "Set up two-factor authentication first" in page
    # A browser session cannot use the API around it either.
    api = client.get("/api/v1/me/")
    assert api.status_code == 403 and api.json()["code"] == "mfa_required"
    _enrol_totp(client)
    assert client.get("/site/").status_code == 200


def test_the_requirement_covers_project_owners_and_admins_but_not_members(client, make_user, mfa_required):
    project = Project.objects.create(slug="vision", name="Vision")
    for name, role in (("owner1", Role.OWNER), ("admin1", Role.ADMIN), ("member1", Role.MEMBER)):
        Membership.objects.create(user=make_user(name), project=project, role=role)
    for name, sent_to_setup in (("owner1", True), ("admin1", True), ("member1", False)):
        client.logout()
        _password_step(client, name)
        response = client.get("/projects/")
        assert (response.status_code == 302 and response["Location"] == "/accounts/2fa/") is sent_to_setup, name


def test_api_tokens_keep_working_for_automation_under_the_requirement(client, make_user, mfa_required):
    root = make_user("root", staff=True)
    _, secret = issue_token(root, name="nightly", scopes=["read"])
    response = client.get("/api/v1/me/", HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert response.status_code == 200 and response.json()["username"] == "root"
