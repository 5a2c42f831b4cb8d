"""What EC2 instances cost: on-demand prices from the AWS Pricing API, Spot prices from EC2's price history.

Plain Python over boto3 clients passed in. The Pricing API is served only from us-east-1 (and ap-south-1) and
moto does not implement it: it is tested on a recorded GetProducts answer through botocore's Stubber, and the
portal's price table (portal/catalog) is what every other part of Kakehashi reads.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal, InvalidOperation

PRICING_REGION = "us-east-1"


@dataclass(frozen=True)
class Offer:
    region: str
    instance_type: str
    market: str  # on-demand | spot
    price_per_hour: Decimal
    currency: str


def _filters(region: str, instance_type: str) -> list[dict]:
    # Linux, shared tenancy, no preinstalled software, capacity actually used: the price a Batch instance runs at.
    terms = {"instanceType": instance_type, "regionCode": region, "operatingSystem": "Linux", "tenancy": "Shared",
             "preInstalledSw": "NA", "capacitystatus": "Used", "marketoption": "OnDemand"}
    return [{"Type": "TERM_MATCH", "Field": field, "Value": value} for field, value in terms.items()]


def on_demand_offers(pricing, region: str, instance_types: Sequence[str]) -> list[Offer]:
    """On-demand hourly prices of these instance types in `region`, from GetProducts (one call per type)."""
    offers = []
    for instance_type in instance_types:
        answer = pricing.get_products(ServiceCode="AmazonEC2", Filters=_filters(region, instance_type), MaxResults=10)
        offer = parse_products(answer.get("PriceList", []), region, instance_type)
        if offer is not None:
            offers.append(offer)
    return offers


def parse_products(price_list: Sequence[str], region: str, instance_type: str) -> Offer | None:
    """The hourly on-demand price in a GetProducts PriceList (each entry a JSON document, as the API sends it)."""
    for raw in price_list:
        product = json.loads(raw) if isinstance(raw, str) else raw
        attributes = product.get("product", {}).get("attributes", {})
        if attributes.get("instanceType") != instance_type or attributes.get("regionCode", region) != region:
            continue
        for term in product.get("terms", {}).get("OnDemand", {}).values():
            for dimension in term.get("priceDimensions", {}).values():
                if dimension.get("unit") != "Hrs":
                    continue
                for currency, amount in dimension.get("pricePerUnit", {}).items():
                    try:
                        price = Decimal(amount)
                    except InvalidOperation:
                        continue
                    if price > 0:
                        return Offer(region, instance_type, "on-demand", price, currency)
    return None


def spot_offers(ec2, region: str, instance_types: Sequence[str], now: datetime) -> list[Offer]:
    """The current Spot price of each type: the highest across the region's zones (a budget wants the bound)."""
    answer = ec2.describe_spot_price_history(InstanceTypes=list(instance_types), ProductDescriptions=["Linux/UNIX"],
                                             StartTime=now, MaxResults=1000)
    highest: dict[str, Decimal] = {}
    for entry in answer.get("SpotPriceHistory", []):
        try:
            price = Decimal(entry["SpotPrice"])
        except (KeyError, InvalidOperation):
            continue
        highest[entry["InstanceType"]] = max(price, highest.get(entry["InstanceType"], Decimal(0)))
    return [Offer(region, t, "spot", highest[t], "USD") for t in instance_types if t in highest]
