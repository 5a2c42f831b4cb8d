"""What happens after the hub's OAuth: sign in to the matched portal account, or explain why not.

No SocialAccount rows are kept: the matching rule (portal.hub.accounts) is applied on every sign-in, so a mapping an
admin adds or removes takes effect at the next one, and the hub never creates portal accounts.
"""

from __future__ import annotations

from allauth.account.utils import perform_login
from allauth.core.exceptions import ImmediateHttpResponse
from allauth.socialaccount import app_settings
from allauth.socialaccount.models import SocialApp
from django.conf import settings
from django.db import transaction
from django.shortcuts import render

from portal.accounts.sso import SocialAccountAdapter
from portal.audit.actions import record
from portal.hub import accounts, hubapi
from portal.hub.provider import PROVIDER_ID


class HubSocialAccountAdapter(SocialAccountAdapter):
    """The institutions' identity providers (the base class) and the hub."""

    def list_apps(self, request, provider=None, client_id=None) -> list[SocialApp]:
        return super().list_apps(request, provider, client_id) + self._hub_apps(provider, client_id)

    def _hub_apps(self, provider, client_id) -> list[SocialApp]:
        # The one OAuth client is the hub service, configured from the environment (no SocialApp rows).
        if not hubapi.enabled() or provider not in (None, PROVIDER_ID):
            return []
        if client_id not in (None, settings.KAKEHASHI_HUB_CLIENT_ID):
            return []
        return [SocialApp(provider=PROVIDER_ID, name="JupyterHub", client_id=settings.KAKEHASHI_HUB_CLIENT_ID,
                          secret=settings.KAKEHASHI_HUB_CLIENT_SECRET)]

    def is_open_for_signup(self, request, sociallogin) -> bool:
        if sociallogin.account.provider != PROVIDER_ID:
            return super().is_open_for_signup(request, sociallogin)
        return False

    def pre_social_login(self, request, sociallogin) -> None:
        if sociallogin.account.provider != PROVIDER_ID:
            return super().pre_social_login(request, sociallogin)
        hub_username = sociallogin.account.uid
        found = accounts.match(hub_username)
        if found.user is None or not found.user.is_active:
            with transaction.atomic():
                record("hub.login_refused", hub_user=hub_username,
                       reason="no account" if found.user is None else "account disabled")
            raise ImmediateHttpResponse(render(request, "hub/no_account.html", {
                "hub_username": hub_username, "disabled": found.user is not None,
                "hub_url": settings.KAKEHASHI_HUB_URL.rstrip("/"),
            }, status=403))
        with transaction.atomic():
            record("hub.login", actor=found.user, hub_user=hub_username, matched_by=found.rule)
        response = perform_login(request, found.user, email_verification=app_settings.EMAIL_VERIFICATION,
                                 redirect_url=sociallogin.get_redirect_url(request))
        raise ImmediateHttpResponse(response)
