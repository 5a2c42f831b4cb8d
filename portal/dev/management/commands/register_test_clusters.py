"""Make the running loopback test cluster usable from the portal (run `make cluster-up` first)."""

from pathlib import Path

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from portal.accounts import loopback
from portal.projects.models import Project


class Command(BaseCommand):
    help = "Register slurm-test, pbs-test, sge-tsubame-test, sge-abci-test and sge-test with hardware and accounts."

    def add_arguments(self, parser):
        parser.add_argument("--state", default=str(loopback.DEFAULT_STATE), help="the harness state directory")
        parser.add_argument("--project", default="demo")
        parser.add_argument("--host", default="127.0.0.1", help="the login node's address as the portal reaches it")
        parser.add_argument("--no-link", action="store_true",
                            help="do not create alice/bob accounts and install their keys (needs the harness locally)")

    def handle(self, *args, state, project, host, no_link, **options):
        state_dir = Path(state)
        if not (state_dir / "known_hosts").exists():
            raise CommandError(f"no test cluster state in {state_dir}: run `make cluster-up` first")
        if not Project.objects.filter(slug=project).exists():
            call_command("setup_demo")
        target = Project.objects.get(slug=project)
        clusters = loopback.register_clusters(state_dir, target, host=host)
        if no_link:
            self.stdout.write(self.style.SUCCESS(f"Registered {', '.join(sorted(clusters))}; link accounts in Settings."))
            return
        users = loopback.link_researchers(clusters, target)
        self.stdout.write(self.style.SUCCESS(
            f"Registered {', '.join(sorted(clusters))} for project {target.slug} (group {loopback.GROUP}). "
            + "Log in as " + ", ".join(f"{u} / {loopback.RESEARCHERS[u]}" for u in users) + " to submit to them."
        ))
