"""The hub as a django-allauth OAuth2 provider: allauth runs the OAuth dance (state, code exchange, errors).

allauth's bundled `jupyterhub` provider reads its URLs once at import; this one reads them from the settings on
every request and sends the token exchange to the hub's API address, which may differ from the address browsers
use (inside docker-compose, for instance). Which portal account the hub user is decided in portal.hub.adapter.
"""

from __future__ import annotations

from allauth.socialaccount.adapter import get_adapter
from allauth.socialaccount.providers.base import ProviderAccount, ProviderException
from allauth.socialaccount.providers.oauth2.client import OAuth2Client
from allauth.socialaccount.providers.oauth2.provider import OAuth2Provider
from allauth.socialaccount.providers.oauth2.views import OAuth2Adapter
from django.conf import settings
from django.utils.http import urlencode

from portal.hub import hubapi

PROVIDER_ID = "jupyterhub"


class HubOAuth2Client(OAuth2Client):
    def get_redirect_url(self, authorization_url, scope, extra_params) -> str:
        # Without scopes, no `scope=` at all: the hub then grants its default (identify the user, nothing more),
        # while the empty value allauth would send is refused as an unknown scope.
        params = {"client_id": self.consumer_key, "redirect_uri": self.callback_url, "response_type": "code"}
        if scope:
            params["scope"] = self.scope_delimiter.join(sorted(set(scope)))
        if self.state:
            params["state"] = self.state
        return f"{authorization_url}?{urlencode({**params, **extra_params})}"


class HubOAuth2Adapter(OAuth2Adapter):
    provider_id = PROVIDER_ID
    client_class = HubOAuth2Client

    @property
    def authorize_url(self) -> str:  # the browser goes here: the hub's public address
        return f"{settings.KAKEHASHI_HUB_URL.rstrip('/')}/hub/api/oauth2/authorize"

    @property
    def access_token_url(self) -> str:  # the portal calls this one: the hub's API address
        return hubapi.api_url("oauth2/token")

    def get_callback_url(self, request, app) -> str:
        # Exactly the redirect URI registered for the service on the hub (oauth_redirect_uri).
        return settings.KAKEHASHI_HUB_CALLBACK_URL

    def complete_login(self, request, app, token, **kwargs):
        with get_adapter().get_requests_session() as session:
            response = session.get(hubapi.api_url("user"), headers={"Authorization": f"token {token.token}"},
                                   timeout=hubapi.TIMEOUT_SECONDS)
        if response.status_code != 200:
            raise ProviderException(f"the JupyterHub answered {response.status_code} when asked who signed in")
        return self.get_provider().sociallogin_from_response(request, response.json())


class HubAccount(ProviderAccount):
    def to_str(self) -> str:
        return self.account.uid


class HubProvider(OAuth2Provider):
    id = PROVIDER_ID
    name = "JupyterHub"
    account_class = HubAccount
    oauth2_adapter_class = HubOAuth2Adapter

    def extract_uid(self, data) -> str:
        return str(data["name"])

    def extract_common_fields(self, data) -> dict:
        return {"username": data["name"]}


provider_classes = [HubProvider]
