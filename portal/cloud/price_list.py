"""Keeping the cloud price table in step with the provider's price list (`manage.py refresh_cloud_prices`):
on demand from AWS's Pricing API, Spot from EC2's price history. The table and how a price becomes a hardware
type's rate (`apply_prices`) are the catalog's (portal/catalog/prices.py)."""

from __future__ import annotations

from datetime import UTC, datetime

from django.db import transaction

from backends import aws_pricing
from portal.catalog.models import CloudPrice
from portal.catalog.prices import PRICE_STEP, apply_prices, cloud_hardware, offer_of


def refresh_prices(cluster, *, pricing, ec2, now: datetime | None = None) -> list[CloudPrice]:
    """Ask AWS what the cluster's instance types cost now (on demand: the Pricing API; Spot: EC2's price
    history), write them to the table and apply them. Worker or management-command side."""
    region = str(cluster.options.get("region", ""))
    wanted: dict[str, set[str]] = {}
    for hardware in cloud_hardware(cluster):
        _, instance_type, market = offer_of(hardware)
        if instance_type:
            wanted.setdefault(market, set()).add(instance_type)
    offers = []
    if wanted.get(CloudPrice.Market.ON_DEMAND):
        offers += aws_pricing.on_demand_offers(pricing, region, sorted(wanted[CloudPrice.Market.ON_DEMAND]))
    if wanted.get(CloudPrice.Market.SPOT):
        offers += aws_pricing.spot_offers(ec2, region, sorted(wanted[CloudPrice.Market.SPOT]), now or datetime.now(UTC))
    # The table keeps 4 decimals: a price that would round to 0 there would make the hardware free. None is real
    # (moto's Spot history answers 0.00001); such an answer is left out and the row keeps its last price.
    offers = [o for o in offers if o.price_per_hour.quantize(PRICE_STEP) > 0]
    saved = []
    with transaction.atomic():
        for offer in offers:
            price, _ = CloudPrice.objects.update_or_create(
                region=offer.region, instance_type=offer.instance_type, market=offer.market,
                defaults={"price_per_hour": offer.price_per_hour.quantize(PRICE_STEP), "currency": offer.currency, "source": "AWS price list"},
            )
            saved.append(price)
        apply_prices()
    return saved
