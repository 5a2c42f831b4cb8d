"""`Authorization: Bearer kh_…` for the API and the CLI."""

from __future__ import annotations

from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication, get_authorization_header

from portal.api import tokens
from portal.audit.actions import client_ip


class TokenAuthentication(BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request):
        parts = get_authorization_header(request).split()
        if not parts or parts[0].lower() != self.keyword.lower().encode():
            return None  # not ours: the session (browser, Swagger UI) may still authenticate the request
        if len(parts) != 2:
            raise exceptions.AuthenticationFailed(
                "malformed Authorization header: send 'Authorization: Bearer kh_…' with the token and nothing else",
                code="token_malformed",
            )
        try:
            secret = parts[1].decode("ascii")
        except UnicodeDecodeError:
            raise exceptions.AuthenticationFailed("malformed API token: it must be plain ASCII", code="token_malformed") from None
        try:
            token = tokens.authenticate(secret)
        except tokens.TokenRefused as exc:
            raise exceptions.AuthenticationFailed(str(exc), code=exc.code) from None
        tokens.record_use(token, client_ip(request))
        return token.user, token

    def authenticate_header(self, request) -> str:
        # Present on every 401 so clients know how to authenticate (and DRF answers 401, not 403).
        return f'{self.keyword} realm="kakehashi"'
