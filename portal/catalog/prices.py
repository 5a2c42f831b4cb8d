"""The cloud price table: what each instance type costs per hour in each region, on demand and on Spot.

A hardware type of an AWS Batch cluster names its instance type and market in its scheduler mapping
({"instance_type": "p4d.24xlarge", "market": "spot"}); its rate per node-hour is the table's price for the
cluster's region, kept in step by `apply_prices` whenever the table changes. Every money path (the estimate
before submit, the reservation, the burn of a running job, the settlement from AWS's attempt times) reads that
rate and converts it to the budget's unit, so cloud money lands in the same ledger as HPC points.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from django.conf import settings
from django.db import transaction

from backends.aws_batch_defs import queue_for
from portal.audit.actions import record
from portal.budgets import actions as budgets
from portal.budgets.queries import budget_of
from portal.catalog.models import CloudPrice, HardwareType
from portal.catalog.queries import hardware_for_project
from portal.clusters.cloud_state import last_seen
from portal.clusters.connect import backend_settings, cloud_kinds

PRICE_STEP = Decimal("0.0001")  # CloudPrice.price_per_hour's decimal places


def cloud_hardware(cluster=None):
    hardware = HardwareType.objects.filter(cluster__kind__in=cloud_kinds()).select_related("cluster")
    return hardware.filter(cluster=cluster) if cluster is not None else hardware


def offer_of(hardware: HardwareType) -> tuple[str, str, str]:
    """(region, instance type, market) a cloud hardware type is priced at."""
    mapping = hardware.scheduler_mapping or {}
    return (str(hardware.cluster.options.get("region", "")), str(mapping.get("instance_type", "")),
            str(mapping.get("market", CloudPrice.Market.ON_DEMAND)))


def price_of(hardware: HardwareType) -> CloudPrice | None:
    region, instance_type, market = offer_of(hardware)
    return CloudPrice.objects.filter(region=region, instance_type=instance_type, market=market).first()


@transaction.atomic
def apply_prices(*, actor=None) -> list[HardwareType]:
    """Give every cloud hardware type its price from the table (per node-hour, in the table's currency). Returns
    the hardware types whose rate changed; one without a price keeps its rate and is named on /site/."""
    changed = []
    for hardware in cloud_hardware():
        price = price_of(hardware)
        if price is None or (hardware.rate, hardware.rate_unit) == (price.price_per_hour, price.currency):
            continue
        before = f"{hardware.rate} {hardware.rate_unit}"
        hardware.rate, hardware.rate_unit = price.price_per_hour, price.currency
        hardware.save(update_fields=["rate", "rate_unit"])
        record("hardware.price", actor=actor, target=hardware, before=before,
               after=f"{price.price_per_hour} {price.currency}", source=price.source)
        changed.append(hardware)
    return changed


# ------------------------------------------------------------------------ the cloud rows of "where to run"


@dataclass(frozen=True)
class CloudRow:
    """One place a shape ("8×A100, 2 h") may run in the cloud, for the comparison before Run."""

    hardware: HardwareType
    price: budgets.Money  # per node-hour, as the price table has it (USD)
    cost: budgets.Money | None  # the whole job in the budget's unit (None: no conversion set)
    reporting: budgets.Money | None  # the same in the site's reporting unit
    waiting: int | None  # jobs waiting for capacity in its queue when the reconciler last looked
    seen_at: str  # when that was (ISO), "" if never


def cloud_rows(project, *, gpus_per_node: int, nodes: int, walltime_seconds: int, gpu_model: str = "") -> list[CloudRow]:
    """Every cloud hardware type the project may use for this shape, cheapest first, with how busy its queue is
    (from the reconciler's last look: a page never asks AWS)."""
    hardware = hardware_for_project(project).filter(cluster__kind__in=cloud_kinds(), gpus_per_node=gpus_per_node,
                                                    max_nodes__gte=nodes)
    if gpu_model:
        hardware = hardware.filter(gpu_model__iexact=gpu_model)
    budget = budget_of(project)
    rows, conversions = [], {}
    for hw in hardware:
        seen = last_seen(hw.cluster) or {}
        mapping = hw.scheduler_mapping or {}
        queue = mapping.get("queue") or queue_for(mapping.get("instance_type", ""), mapping.get("market", "on-demand"),
                                                  backend_settings(hw.cluster))
        rows.append(CloudRow(
            hardware=hw, price=budgets.Money(hw.rate, hw.rate_unit),
            cost=cost_or_none(hw, nodes, walltime_seconds, budget.unit if budget else hw.rate_unit, conversions),
            reporting=cost_or_none(hw, nodes, walltime_seconds, settings.KAKEHASHI_REPORTING_UNIT, conversions),
            waiting=(seen.get("waiting") or {}).get(queue), seen_at=seen.get("at", ""),
        ))
    return sorted(rows, key=lambda r: (r.reporting.amount if r.reporting else float("inf"), r.hardware.slug))


def cost_or_none(hardware: HardwareType, nodes: int, seconds: int, unit: str,
                 conversions: dict | None = None) -> budgets.Money | None:
    """What `nodes` of `hardware` cost for `seconds` in `unit`, or None where no conversion is set (the place is
    shown unpriced). `conversions`: the caller's cache, so a comparison looks each pair of units up once."""
    try:
        return budgets.cost(hardware.rate, hardware.rate_unit, nodes, seconds, unit, conversions)
    except budgets.NoConversion:
        return None
