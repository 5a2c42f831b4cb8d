"""Signing in as people do, in Chromium: through the university's OpenID Connect provider, and with a passkey held
by Chromium's virtual authenticator (the DevTools WebAuthn domain: a real WebAuthn ceremony, a software key)."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import PASSWORD, log_in
from tests.browser.test_content_security_policy import PolicyWatch
from tests.signin.conftest import PASSWORDS

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_researcher_signs_in_through_the_universitys_provider(page, live_server, identity_provider, shots):
    identity_provider.allow_new_users = True
    identity_provider.save()
    watch = PolicyWatch(page)
    page.goto(live_server.url + "/")
    expect(page).to_have_url(re.compile(r"/accounts/login/"))
    shots(page, "login-page")
    page.get_by_role("link", name="University of Tokyo").click()
    shots(page, "continue-to-provider")
    page.get_by_role("button", name="Continue").click()
    # The provider's own page, on its own origin.
    expect(page.get_by_role("heading", name="University sign-in")).to_be_visible()
    assert page.url.startswith(identity_provider.server_url.rsplit("/o", 1)[0])
    page.get_by_label("University ID").fill("hanako")
    page.get_by_label("Password").fill(PASSWORDS["hanako"])
    shots(page, "provider-login")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("navigation", name="Main navigation")).to_contain_text("hanako")
    assert page.url == live_server.url + "/"
    shots(page, "signed-in")
    # The walk through the provider broke no rule of the policy (its origin is allowed as a form target).
    assert watch.violations == []


def _add_virtual_authenticator(page: Page) -> dict:
    cdp = page.context.new_cdp_session(page)
    cdp.send("WebAuthn.enable", {"enableUI": False})
    authenticator = cdp.send("WebAuthn.addVirtualAuthenticator", {"options": {
        "protocol": "ctap2", "transport": "internal", "hasResidentKey": True, "hasUserVerification": True,
        "isUserVerified": True, "automaticPresenceSimulation": True,
    }})
    return {"cdp": cdp, "id": authenticator["authenticatorId"]}


def _credentials(authenticator: dict) -> list[dict]:
    return authenticator["cdp"].send("WebAuthn.getCredentials", {"authenticatorId": authenticator["id"]})["credentials"]


def test_a_researcher_adds_a_passkey_and_signs_in_with_it_alone(page, live_server, make_user, shots):
    make_user("alice")
    authenticator = _add_virtual_authenticator(page)
    log_in(page, live_server.url, "alice")
    page.goto(live_server.url + "/accounts/2fa/webauthn/add/")
    if "/accounts/reauthenticate/" in page.url:  # changing sign-in factors asks for the password again
        page.get_by_label("Password").fill(PASSWORD)
        page.get_by_role("button", name="Confirm").click()
    expect(page.get_by_role("heading", name="Add Security Key")).to_be_visible()
    page.get_by_label("Name").fill("laptop")
    page.get_by_label("Passwordless").check()
    shots(page, "add-passkey")
    page.get_by_role("button", name="Add").click()
    expect(page).not_to_have_url(re.compile(r"/webauthn/add/"))
    shots(page, "passkey-added")
    assert len(_credentials(authenticator)) == 1 and _credentials(authenticator)[0]["isResidentCredential"]

    from allauth.mfa.models import Authenticator

    assert Authenticator.objects.filter(user__username="alice", type=Authenticator.Type.WEBAUTHN).count() == 1
    page.context.clear_cookies()
    page.goto(live_server.url + "/accounts/login/")
    page.get_by_role("button", name="Sign in with a passkey").click()
    expect(page.get_by_role("navigation", name="Main navigation")).to_contain_text("alice")
    shots(page, "signed-in-with-passkey")
    assert _credentials(authenticator)[0]["signCount"] >= 1


def test_after_the_password_a_security_key_is_asked_for_as_the_second_factor(page, live_server, make_user, shots):
    make_user("alice")
    authenticator = _add_virtual_authenticator(page)
    log_in(page, live_server.url, "alice")
    page.goto(live_server.url + "/accounts/2fa/webauthn/add/")
    if "/accounts/reauthenticate/" in page.url:
        page.get_by_label("Password").fill(PASSWORD)
        page.get_by_role("button", name="Confirm").click()
    page.get_by_label("Name").fill("yubikey")
    page.get_by_role("button", name="Add").click()
    expect(page).not_to_have_url(re.compile(r"/webauthn/add/"))
    page.context.clear_cookies()

    page.goto(live_server.url + "/jobs/")
    page.get_by_label(re.compile(r"^(Login|Username)", re.I)).fill("alice")
    page.get_by_label(re.compile(r"^Password")).fill(PASSWORD)
    page.get_by_role("button", name="Sign In", exact=True).click()
    expect(page).to_have_url(re.compile(r"/accounts/2fa/authenticate/"))
    shots(page, "second-factor")
    page.get_by_role("button", name="Use a security key").click()
    expect(page.get_by_role("navigation", name="Main navigation")).to_contain_text("alice")
    assert len(_credentials(authenticator)) == 1


def test_a_researcher_signs_in_through_a_gakunin_style_saml_idp(page, live_server, saml_identity_provider, shots):
    import requests

    from tests.signin.conftest import SAML_PEOPLE

    requests.post(saml_identity_provider.saml_entity_id.removesuffix("/metadata") + "/sp-metadata", timeout=10,
                  data=requests.get(f"{live_server.url}/accounts/saml/{saml_identity_provider.slug}/metadata/", timeout=10).content)
    watch = PolicyWatch(page)
    page.goto(live_server.url + "/accounts/login/")
    page.get_by_role("link", name="University of Tokyo (GakuNin)").click()
    page.get_by_role("button", name="Continue").click()
    expect(page.get_by_role("heading", name="Institution sign-in")).to_be_visible()
    page.get_by_label("User name").fill("sato")
    page.get_by_label("Password").fill(SAML_PEOPLE[0]["password"])
    shots(page, "idp-login")
    page.get_by_role("button", name="Log in").click()  # the IdP's page posts the signed response back by itself
    expect(page.get_by_role("navigation", name="Main navigation")).to_contain_text("sato")
    shots(page, "signed-in")
    assert watch.violations == []
