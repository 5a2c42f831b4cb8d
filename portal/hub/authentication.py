"""`Authorization: token <hub token>`: requests from a JupyterLab server on the hub, acting for its user.

The hub says whose token it is (portal.hub.hubapi); the documented rule (portal.hub.accounts) says which portal
account that is. Such a request may read and submit, like an API token with those scopes, and the account's role
in each project still decides. `token` is the keyword JupyterHub itself uses, so it never collides with the
portal's own `Bearer kh_…` tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication, get_authorization_header

from portal.api.models import Scope
from portal.hub import accounts, hubapi


class HubUnreachable(exceptions.APIException):
    status_code = 503
    default_code = "hub_unavailable"


@dataclass(frozen=True)
class HubCredential:
    """request.auth for a hub token: what it may do (portal.api.permissions checks `allows`)."""

    hub_username: str
    scopes: tuple[str, ...] = (Scope.READ, Scope.SUBMIT)

    def allows(self, scope: str) -> bool:
        return scope in self.scopes


class HubTokenAuthentication(BaseAuthentication):
    keyword = "token"

    def authenticate(self, request):
        parts = get_authorization_header(request).split()
        if not parts or parts[0].lower() != self.keyword.encode():
            return None
        if not hubapi.enabled():
            raise exceptions.AuthenticationFailed(
                "hub tokens are not accepted: this portal is not connected to a JupyterHub", code="hub_not_configured")
        if len(parts) != 2:
            raise exceptions.AuthenticationFailed(
                "malformed Authorization header: send 'Authorization: token <hub token>' and nothing else",
                code="token_malformed")
        try:
            token = parts[1].decode("ascii")
            hub_user = hubapi.user_for_token(token)
        except UnicodeDecodeError:
            raise exceptions.AuthenticationFailed("malformed hub token: it must be plain ASCII",
                                                  code="token_malformed") from None
        except hubapi.HubTokenRefused as exc:
            raise exceptions.AuthenticationFailed(str(exc), code="hub_token_refused") from None
        except hubapi.HubUnavailable as exc:
            raise HubUnreachable(str(exc)) from None
        found = accounts.match(hub_user.name)
        if found.user is None:
            raise exceptions.PermissionDenied(
                f"the hub user {hub_user.name!r} has no Kakehashi account: ask a site admin to create one or to map "
                "this hub user to an existing account", code="no_portal_account")
        if not found.user.is_active:
            raise exceptions.AuthenticationFailed(f"the Kakehashi account of hub user {hub_user.name!r} is disabled",
                                                  code="account_disabled")
        return found.user, HubCredential(hub_user.name)

    def authenticate_header(self, request) -> str:
        return f'{self.keyword} realm="kakehashi"'
