"""manage.py refresh_cloud_prices CLUSTER: the price table's rows for the cluster's instance types from AWS."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from backends import aws_pricing
from portal.cloud import price_list as prices
from portal.clusters.connect import cloud_client, cloud_kinds
from portal.clusters.models import Cluster


class Command(BaseCommand):
    help = "Refresh the cloud price table from the AWS Pricing API (on demand) and EC2's Spot price history."

    def add_arguments(self, parser):
        parser.add_argument("cluster", help="slug of an AWS Batch cluster")

    def handle(self, *args, **options):
        cluster = Cluster.objects.filter(slug=options["cluster"], kind__in=cloud_kinds()).first()
        if cluster is None:
            raise CommandError(f"no AWS Batch cluster {options['cluster']!r}")
        try:
            saved = prices.refresh_prices(cluster, pricing=cloud_client(cluster, "pricing", aws_pricing.PRICING_REGION),
                                          ec2=cloud_client(cluster, "ec2"))
        except Exception as exc:  # noqa: BLE001 - botocore raises many kinds; each means "AWS did not answer"
            raise CommandError(f"AWS did not give the prices: {exc}") from None
        for price in saved:
            self.stdout.write(str(price))
