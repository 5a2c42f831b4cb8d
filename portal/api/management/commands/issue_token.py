"""manage.py issue_token USERNAME [--scope read --scope submit] [--expires 30d|2026-12-31] [--name N]

Prints only the token, so scripts can capture it: TOKEN=$(python manage.py issue_token alice --scope submit).
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from portal.api import tokens
from portal.api.models import Scope


class Command(BaseCommand):
    help = "Issue an API token for a user and print it (only the token, once)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("username")
        parser.add_argument("--scope", action="append", dest="scopes", choices=Scope.values,
                            help="read (default), submit or admin; repeat for several")
        parser.add_argument("--expires", default="", help="e.g. 30d, 12h, 2w or 2026-12-31 (default: never)")
        parser.add_argument("--name", default="issued by manage.py", help="what the token is for")

    def handle(self, *args, username: str, scopes: list[str] | None, expires: str, name: str, **options) -> None:
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"no user {username!r}")
        try:
            expires_at = tokens.parse_expiry(expires)
            _, secret = tokens.issue_token(user, name=name, scopes=scopes or [Scope.READ], expires_at=expires_at)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(secret)
