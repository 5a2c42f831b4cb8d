"""manage.py cloud_setup CLUSTER [--teardown]: an AWS Batch cluster's queues, created, updated or removed."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from backends.base import BackendError
from portal.cloud import setup as cloud
from portal.clusters.management.lookup import cluster_named


class Command(BaseCommand):
    help = ("Create or update an AWS Batch cluster's compute environments (minvCpus 0), job queues and job "
            "definitions, one per hardware type; --teardown removes them. Safe to run again.")

    def add_arguments(self, parser):
        parser.add_argument("cluster", help="slug of an AWS Batch cluster")
        parser.add_argument("--teardown", action="store_true", help="remove everything the cluster set up")

    def handle(self, *args, **options):
        cluster = cluster_named(options["cluster"])
        try:
            lines = cloud.tear_down(cluster) if options["teardown"] else cloud.set_up(cluster)
        except (cloud.NotACloudCluster, BackendError) as exc:
            raise CommandError(str(exc)) from None
        except Exception as exc:  # noqa: BLE001 - botocore's errors: AWS refused or did not answer
            raise CommandError(f"AWS Batch: {exc}") from None
        for line in lines or ["nothing to do"]:
            self.stdout.write(line)
