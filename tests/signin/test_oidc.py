"""Single sign-on with OpenID Connect against a real provider (tests/signin/oidc_idp), under the rules admins set."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from portal.audit.models import AuditEntry
from tests.signin.conftest import sign_in_with_provider

pytestmark = pytest.mark.django_db


def _signed_in_as(client) -> str | None:
    response = client.get("/api/v1/me/")
    return response.json()["username"] if response.status_code == 200 else None


def test_a_new_person_is_told_to_ask_for_an_account_while_new_accounts_are_off(client, identity_provider):
    response = sign_in_with_provider(client, "hanako")
    assert response.status_code == 403
    assert "no portal account linked to your University of Tokyo identity" in response.content.decode()
    assert not get_user_model().objects.filter(email="hanako@u-tokyo.ac.jp").exists()
    assert _signed_in_as(client) is None
    refused = AuditEntry.objects.get(action="sso.refused")
    assert refused.data["reason"] == "no account" and refused.ip == "127.0.0.1"


def test_a_new_person_gets_an_account_when_the_admin_allows_new_users(client, identity_provider):
    identity_provider.allow_new_users = True
    identity_provider.save()
    response = sign_in_with_provider(client, "hanako")
    assert response.status_code == 302 and response["Location"] == "/"
    user = get_user_model().objects.get(email="hanako@u-tokyo.ac.jp")
    assert user.username == "hanako" and user.first_name == "Hanako" and not user.has_usable_password()
    assert _signed_in_as(client) == "hanako"
    assert AuditEntry.objects.filter(action="sso.signup", actor=user).exists()
    # The second time, the linked identity signs in to the same account.
    client.logout()
    assert sign_in_with_provider(client, "hanako").status_code == 302
    assert _signed_in_as(client) == "hanako" and get_user_model().objects.filter(email="hanako@u-tokyo.ac.jp").count() == 1


def test_an_address_outside_the_allowed_domains_is_refused(client, identity_provider):
    identity_provider.allow_new_users = True
    identity_provider.save()
    response = sign_in_with_provider(client, "guest")
    assert response.status_code == 403
    assert "guest@example.com is not in the domains University of Tokyo may sign in for (u-tokyo.ac.jp)" in response.content.decode()
    assert _signed_in_as(client) is None


def test_an_existing_account_is_linked_by_a_verified_address_only_when_the_admin_allows_it(client, identity_provider, make_user):
    existing = make_user("yamada", email="hanako@u-tokyo.ac.jp")
    response = sign_in_with_provider(client, "hanako")
    assert response.status_code == 403 and "already uses hanako@u-tokyo.ac.jp" in response.content.decode()
    assert _signed_in_as(client) is None

    identity_provider.link_verified_email = True
    identity_provider.save()
    response = sign_in_with_provider(client, "hanako")
    assert response.status_code == 302
    assert _signed_in_as(client) == "yamada"
    assert existing.socialaccount_set.get().uid  # linked: later sign-ins find the identity itself
    assert AuditEntry.objects.filter(action="sso.login", actor=existing, data__how="verified address").exists()


def test_an_unverified_address_never_links_to_an_existing_account(client, identity_provider, make_user):
    identity_provider.link_verified_email = True
    identity_provider.allow_new_users = True
    identity_provider.save()
    make_user("taro-local", email="taro@u-tokyo.ac.jp")
    response = sign_in_with_provider(client, "taro")  # the provider says taro's address is not verified
    assert response.status_code == 403 and "already uses taro@u-tokyo.ac.jp" in response.content.decode()
    assert _signed_in_as(client) is None


def test_a_disabled_account_cannot_sign_in_through_the_provider(client, identity_provider):
    identity_provider.allow_new_users = True
    identity_provider.save()
    sign_in_with_provider(client, "hanako")
    client.logout()
    get_user_model().objects.filter(username="hanako").update(is_active=False)
    response = sign_in_with_provider(client, "hanako")
    assert response.status_code == 403 and "disabled" in response.content.decode()
    assert _signed_in_as(client) is None


def test_a_disabled_provider_offers_no_sign_in(client, identity_provider):
    identity_provider.enabled = False
    identity_provider.save()
    assert "University of Tokyo" not in client.get("/accounts/login/").content.decode()
    assert client.post(f"/accounts/oidc/{identity_provider.slug}/login/").status_code == 404
