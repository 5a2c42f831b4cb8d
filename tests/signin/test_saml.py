"""Single sign-on with SAML, as Japanese universities federate through GakuNin: a real IdP (pysaml2's, in its own
process) signs its response, and attributes arrive under their OIDs (eduPersonPrincipalName, mail, …)."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from portal.audit.models import AuditEntry
from tests.signin.conftest import sign_in_with_saml

pytestmark = pytest.mark.django_db


def _signed_in_as(client) -> str | None:
    response = client.get("/api/v1/me/")
    return response.json()["username"] if response.status_code == 200 else None


def test_a_researcher_signs_in_through_the_institutions_saml_idp(client, saml_identity_provider):
    response = sign_in_with_saml(client, "sato")
    assert response.status_code == 302 and response["Location"] == "/", response.content.decode()[:2000]
    user = get_user_model().objects.get(email="ichiro.sato@u-tokyo.ac.jp")
    assert _signed_in_as(client) == user.username == "sato"  # eduPersonPrincipalName's local part
    assert (user.first_name, user.last_name) == ("Ichiro", "Sato")
    # The identity is the eduPersonPrincipalName, as GakuNin service providers key people.
    assert user.socialaccount_set.get().uid == "sato@u-tokyo.ac.jp"
    assert AuditEntry.objects.filter(action="sso.signup", actor=user, data__provider="gakunin-todai").exists()


def test_the_portal_publishes_its_service_provider_metadata_for_the_federation(client, saml_identity_provider):
    response = client.get("/accounts/saml/gakunin-todai/metadata/", HTTP_HOST="localhost")
    assert response.status_code == 200
    body = response.content.decode()
    assert 'entityID="http://localhost/accounts/saml/gakunin-todai/metadata/"' in body
    assert "http://localhost/accounts/saml/gakunin-todai/acs/" in body


def test_the_saml_rules_are_the_same_as_for_oidc(client, saml_identity_provider):
    saml_identity_provider.allow_new_users = False
    saml_identity_provider.save()
    response = sign_in_with_saml(client, "sato")
    assert response.status_code == 403 and "no portal account linked" in response.content.decode()
    assert _signed_in_as(client) is None


def test_an_existing_account_is_linked_by_the_institutions_address_when_the_admin_allows_it(client, saml_identity_provider, make_user):
    existing = make_user("isato", email="ichiro.sato@u-tokyo.ac.jp")
    saml_identity_provider.link_verified_email = True
    saml_identity_provider.save()
    response = sign_in_with_saml(client, "sato")
    assert response.status_code == 302
    assert _signed_in_as(client) == "isato"
    assert existing.socialaccount_set.get().uid == "sato@u-tokyo.ac.jp"


def test_a_wrong_password_at_the_idp_signs_no_one_in(client, saml_identity_provider):
    assert sign_in_with_saml(client, "sato", password="wrong") is None  # the IdP shows its form again
    assert _signed_in_as(client) is None
