"""manage.py service_account CLUSTER USERNAME: the site's own account on a cluster, for site admins' health checks."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from portal.clusters import actions
from portal.clusters.management.lookup import cluster_named


class Command(BaseCommand):
    help = ("Give the site's operations project (default site-ops, created if missing) an allocation on CLUSTER and "
            "a service account USERNAME there with a key the portal generates; prints the public key to install in "
            "~USERNAME/.ssh/authorized_keys on the login node. Site admins' health checks then run as it. "
            "Safe to run again (the key is kept unless --new-key).")

    def add_arguments(self, parser):
        parser.add_argument("cluster", help="slug of the cluster")
        parser.add_argument("username", help="the service account's user name on the cluster")
        parser.add_argument("--project", default=actions.OPERATIONS_PROJECT, help="the operations project's slug")
        parser.add_argument("--group", default="", help="scheduler group/account the checks are charged to")
        parser.add_argument("--new-key", action="store_true", help="generate another key (the old one stops working)")
        parser.add_argument("--verify", action="store_true", help="log in with the key now and say whether it works")

    def handle(self, *args, **options):
        cluster = cluster_named(options["cluster"])
        try:
            account, new = actions.set_up_service_account(
                cluster, options["username"], project_slug=options["project"], group=options["group"],
                new_key=options["new_key"])
        except actions.NotOperations as exc:
            raise CommandError(str(exc)) from None
        except Exception as exc:  # noqa: BLE001 - a bad user name or group: the model's own message
            raise CommandError(f"cannot set up the service account: {exc}") from None
        if options["verify"]:
            if not actions.verify_account(account.pk):
                account.refresh_from_db()
                raise CommandError(f"{account}: the key does not log in yet: {account.last_error}")
            self.stdout.write(f"{account}: logs in")
            return
        self.stdout.write(account.public_key)
        if new:
            self.stderr.write(f"Install the line above in ~{account.username}/.ssh/authorized_keys on "
                              f"{cluster.login_host or cluster.name}, then run this again with --verify.")
