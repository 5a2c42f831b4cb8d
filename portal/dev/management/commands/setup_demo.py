"""Create the demo installation `make run` shows: accounts, a project with a budget, the local cluster."""

from decimal import Decimal

from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand
from django.db import transaction

from backends.local import job_python, missing_on_host
from portal.budgets.models import Budget
from portal.catalog.defaults import ensure_default_presets
from portal.catalog.job_templates import HOST_TORCH_HINT
from portal.catalog.models import HardwareType, Software
from portal.clusters.connect import backend_settings
from portal.clusters.models import Allocation, Cluster, Kind
from portal.projects.models import Membership, Project, Role

DEMO_USER, DEMO_PASSWORD = "demo", "kakehashi-demo"
ADMIN_USER, ADMIN_PASSWORD = "admin", "kakehashi-admin"


class Command(BaseCommand):
    help = "Create (or update) the demo accounts, project, budget and local cluster."

    def add_arguments(self, parser):
        parser.add_argument("--migrate", action="store_true",
                            help="migrate the database first, in this process (`make run` starts a Django less)")

    def handle(self, *args, migrate: bool = False, **options):
        if migrate:
            call_command("migrate", interactive=False, verbosity=0)
        self.create_demo()

    @transaction.atomic
    def create_demo(self):
        User = get_user_model()
        demo, created = User.objects.get_or_create(username=DEMO_USER, defaults={"email": "demo@example.org"})
        if created:
            demo.set_password(DEMO_PASSWORD)
            demo.save()
        admin, created = User.objects.get_or_create(
            username=ADMIN_USER, defaults={"email": "admin@example.org", "is_staff": True, "is_superuser": True}
        )
        if created:
            admin.set_password(ADMIN_PASSWORD)
            admin.save()
        # No word on where jobs run: `make cluster-up` adds the test clusters to this project, and the project
        # page's Clusters card lists every place its jobs may run.
        project, _ = Project.objects.get_or_create(
            slug="demo", defaults={"name": "Demo project", "description": "Try Kakehashi here."}
        )
        if project.description == "Try Kakehashi here: jobs run on this machine.":  # an older demo's words
            Project.objects.filter(pk=project.pk).update(description="Try Kakehashi here.")
        Membership.objects.get_or_create(user=demo, project=project, defaults={"role": Role.OWNER})
        Budget.objects.get_or_create(
            project=project,
            defaults={"amount": Decimal("1000"), "unit": "points", "period": "monthly", "strict": True,
                      "alert_thresholds": [50, 80, 100]},
        )
        local, _ = Cluster.objects.get_or_create(
            slug="local", defaults={"name": "This machine", "kind": Kind.LOCAL,
                                    "description": "Runs jobs as processes on the portal host (no scheduler)."}
        )
        HardwareType.objects.get_or_create(
            slug="local-cpu",
            defaults={"cluster": local, "name": "Local CPU", "cpus_per_node": 2, "max_nodes": 1,
                      "max_walltime_hours": 24, "rate": Decimal("1"), "rate_unit": "points"},
        )
        Allocation.objects.get_or_create(project=project, cluster=local)
        shell, _ = Software.objects.get_or_create(
            slug="python3", defaults={"name": "Python 3 (system)", "kind": Software.Kind.MODULES, "modules": [],
                                      "description": "The python3 on the machine, no modules."}
        )
        shell.clusters.add(local)
        # What the demo's Python provides, asked of it at every start (`make torch` adds torch): the job form then
        # picks it for a template, and says why not while it cannot run one (docs/decisions/0035).
        missing = missing_on_host(("torch", "papermill"), "torchrun", backend_settings(local))
        provides = [name for name in ("torch", "papermill") if name not in missing and not (
            name == "torch" and "torchrun" in missing)]
        if shell.provides != provides:
            Software.objects.filter(pk=shell.pk).update(provides=provides)
        ensure_default_presets()
        if "torch" not in provides:
            self.stdout.write(f"The job templates (DDP training, health check) need torch, which {job_python()} does "
                              f"not have: {HOST_TORCH_HINT}.")
        self.stdout.write(self.style.SUCCESS(
            f"Demo ready. Log in as {DEMO_USER} / {DEMO_PASSWORD} (researcher) or {ADMIN_USER} / {ADMIN_PASSWORD} (site admin)."
        ))
