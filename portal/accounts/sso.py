"""Single sign-on: the identity providers site admins configure, and who each of them may sign in.

allauth runs the protocols (OpenID Connect, SAML: state, PKCE, signatures, the callback); this module turns each
enabled IdentityProvider into allauth's SocialApp and applies its linking rules after the provider has answered:

- allowed_domains: the address the provider asserts must be in one of them (subdomains included);
- an identity seen before signs in to the account it is linked to;
- link_verified_email: otherwise an existing account with the address the provider asserts *as verified* is
  linked and signed in (allauth's email authentication, which also wipes a password set by someone who registered
  that address without proving it);
- allow_new_users: otherwise a new account is created, or the person is told to ask for one.
Every decision is written to the audit log.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from allauth.account.models import EmailAddress
from allauth.account.utils import user_username
from allauth.core.exceptions import ImmediateHttpResponse
from allauth.socialaccount.adapter import DefaultSocialAccountAdapter
from allauth.socialaccount.models import SocialApp, SocialLogin
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.db import transaction
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver
from django.shortcuts import render

from portal.accounts.models import IdentityProvider, Protocol
from portal.audit.actions import record

_ORIGINS_CACHE_KEY = "sso:provider-origins"


def social_app(idp: IdentityProvider) -> SocialApp:
    """allauth's view of one identity provider (never saved: the IdentityProvider row is the configuration)."""
    settings: dict = {
        # allauth links an existing account by address only when the provider says it verified it: an OIDC
        # provider says so per person (email_verified); a SAML IdP's signed `mail` comes from the institution's
        # own directory, which is as verified as an address gets.
        "email_authentication": idp.link_verified_email,
        "verified_email": idp.protocol == Protocol.SAML,
    }
    if idp.protocol == Protocol.OIDC:
        settings |= {"server_url": idp.server_url, "oauth_pkce_enabled": True}
        client_id, secret = idp.client_id, idp.client_secret()
    else:
        idp_settings = {"entity_id": idp.saml_entity_id}
        if idp.saml_metadata_url:
            idp_settings["metadata_url"] = idp.saml_metadata_url
        else:
            idp_settings |= {"sso_url": idp.saml_sso_url, "x509cert": idp.saml_x509cert}
        settings |= {
            "idp": idp_settings,
            "attribute_mapping": idp.saml_attribute_mapping,
            # Responses must be signed by the IdP's key; the SP's own metadata URL is its entity ID.
            "advanced": {"want_assertion_signed": True, "strict": True},
        }
        client_id, secret = idp.slug, ""  # allauth's SAML URLs carry the "organisation slug" as client_id
    return SocialApp(provider=idp.protocol, provider_id=idp.slug, name=idp.name, client_id=client_id,
                     secret=secret, settings=settings)


def provider_origins() -> list[str]:
    """Origins the sign-in forms may lead to (the Content-Security-Policy's form-action)."""
    origins = cache.get(_ORIGINS_CACHE_KEY)
    if origins is None:
        origins = sorted({
            origin(url)
            for idp in IdentityProvider.objects.filter(enabled=True)
            for url in (idp.server_url, idp.saml_sso_url, idp.saml_metadata_url)
            if url
        })
        cache.set(_ORIGINS_CACHE_KEY, origins, 300)
    return origins


def origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


@receiver([post_save, post_delete], sender=IdentityProvider)
def _forget_origins(**kwargs) -> None:
    cache.delete(_ORIGINS_CACHE_KEY)


def domain_allowed(address: str, domains: list[str]) -> bool:
    if not domains:
        return True
    host = address.rpartition("@")[2].lower()
    return bool(host) and any(host == d or host.endswith("." + d) for d in domains)


def asserted_address(sociallogin: SocialLogin) -> str:
    """The address the provider vouches for: its email, or for SAML an eduPersonPrincipalName-style uid."""
    for address in sociallogin.email_addresses:
        if address.email:
            return address.email
    uid = sociallogin.account.uid or ""
    return uid if "@" in uid else ""


class SocialAccountAdapter(DefaultSocialAccountAdapter):
    def list_apps(self, request, provider=None, client_id=None) -> list[SocialApp]:
        apps = [social_app(idp) for idp in IdentityProvider.objects.filter(enabled=True)]
        if provider:
            apps = [a for a in apps if provider in (a.provider, a.provider_id)]
        if client_id:
            apps = [a for a in apps if a.client_id == client_id]
        return apps

    def is_open_for_signup(self, request, sociallogin) -> bool:
        idp = _identity_provider(sociallogin)
        return idp is not None and idp.allow_new_users

    def pre_social_login(self, request, sociallogin: SocialLogin) -> None:
        idp = _identity_provider(sociallogin)
        if idp is None:  # a provider configured elsewhere (a subclass's own): its rules are its own
            return
        address = asserted_address(sociallogin)
        who = {"provider": idp.slug, "uid": sociallogin.account.uid, "address": address}
        if not domain_allowed(address, idp.domains()):
            _refuse(request, idp, who, "domain", f"{address or 'an account without an address'} is not in "
                    f"the domains {idp.name} may sign in for ({', '.join(idp.domains())}).")
        if sociallogin.is_existing:  # linked before, or found by a verified address (link_verified_email)
            user = sociallogin.user
            if not user.is_active:
                _refuse(request, idp, who, "disabled", "This portal account is disabled.", actor=user)
            how = "verified address" if getattr(sociallogin, "_did_authenticate_by_email", None) else "linked identity"
            with transaction.atomic():
                record("sso.login", actor=user, how=how, **who)
            return
        if address and _address_taken(address):
            _refuse(request, idp, who, "address in use",
                    f"A portal account already uses {address}. Sign in to it with its password, or ask a site admin "
                    f"to link {idp.name} sign-ins by verified address.")
        if not idp.allow_new_users:
            _refuse(request, idp, who, "no account",
                    f"There is no portal account linked to your {idp.name} identity, and new accounts are not created "
                    "from it. Ask a site admin for an account.")

    def populate_user(self, request, sociallogin, data):
        user = super().populate_user(request, sociallogin, data)
        if not data.get("username") and "@" in (sociallogin.account.uid or ""):
            # SAML: the eduPersonPrincipalName's local part, the name people use on campus (sato@u-tokyo.ac.jp → sato)
            user_username(user, sociallogin.account.uid.split("@")[0])
        return user

    def save_user(self, request, sociallogin, form=None):
        user = super().save_user(request, sociallogin, form)
        record("sso.signup", actor=user, provider=sociallogin.account.provider, uid=sociallogin.account.uid,
               address=asserted_address(sociallogin))
        return user


def _identity_provider(sociallogin: SocialLogin) -> IdentityProvider | None:
    return IdentityProvider.objects.filter(slug=sociallogin.account.provider).first()


def _address_taken(address: str) -> bool:
    return (
        get_user_model().objects.filter(email__iexact=address).exists()
        or EmailAddress.objects.filter(email__iexact=address).exists()
    )


def _refuse(request, idp: IdentityProvider, who: dict, reason: str, message: str, *, actor=None) -> None:
    with transaction.atomic():
        record("sso.refused", actor=actor, reason=reason, **who)
    raise ImmediateHttpResponse(render(request, "accounts/sso_refused.html", {
        "provider": idp, "message": message,
    }, status=403))
