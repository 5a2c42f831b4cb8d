"""python manage.py hub_accounts: every hub user and the portal account the matching rule gives them.

Reads the hub's users with the service's own token (the service role's list:users scope), so a site admin sees who
would get the "no Kakehashi account" page before they try.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from portal.hub import accounts, hubapi


class Command(BaseCommand):
    help = "List the hub's users and the portal account each one signs in as (mapping, same name, or none)."

    def handle(self, *args, **options):
        if not hubapi.enabled():
            raise CommandError("no JupyterHub is configured: set KAKEHASHI_HUB_URL and KAKEHASHI_HUB_API_TOKEN")
        try:
            users = hubapi.list_users()
        except (hubapi.HubUnavailable, hubapi.HubTokenRefused) as exc:
            raise CommandError(f"{exc} (the service's token needs the scope list:users)") from None
        rows = [("hub user", "portal account", "matched by")]
        for hub_user in sorted(users, key=lambda u: u["name"]):
            found = accounts.match(hub_user["name"])
            account = "—" if found.user is None else found.user.get_username() + ("" if found.user.is_active else " (disabled)")
            rows.append((hub_user["name"], account, found.rule))
        widths = [max(len(row[i]) for row in rows) for i in range(3)]
        for row in rows:
            self.stdout.write("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
