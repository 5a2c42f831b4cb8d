"""One comparison before Run: every place a project may run a shape ("8×A100, 2 h"), cheapest first.

A shape is a number of GPUs (or, for a CPU job, of nodes), a walltime and optionally the GPU model asked for.
A place is a hardware type the project may use that can hold it: enough whole nodes of it (8 GPUs are one
8-GPU node, or two TSUBAME f_nodes of 4) within its node and walltime limits, on any cluster, the cloud
included (`prices.cloud_rows`). Each place says what the job would cost in the budget's unit and in the site's
reporting unit, and how busy it is now from what the health beat last recorded (portal/clusters/health.py) or,
for a cloud queue, what the reconciler last saw: this module never asks a scheduler (docs/decisions/0004).
Used by the job form's preview, `GET /api/v1/places/`, a dry run's answer and `kakehashi places`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from datetime import datetime
from decimal import Decimal

from django.conf import settings
from django.utils import timezone

from portal.budgets import actions as budgets
from portal.budgets.queries import budget_of
from portal.catalog.models import HardwareType
from portal.catalog.prices import cloud_rows, cost_or_none
from portal.catalog.queries import hardware_for_project, missing_accounts
from portal.clusters.connect import is_cloud
from portal.clusters.models import ClusterHealth

MAX_GPUS = 4096


class BadShape(ValueError):
    """A shape that cannot be compared (no GPUs and no nodes, a walltime of zero); the message says why."""

    def __init__(self, message: str, field: str):
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class Shape:
    gpus: int  # in all; 0: a CPU job of `nodes` nodes
    walltime_seconds: int
    gpu_model: str = ""  # what was asked for ("a100"); other models are shown too, marked as such
    nodes: int = 1  # only for a CPU job

    def __post_init__(self) -> None:
        if self.gpus < 0 or self.gpus > MAX_GPUS:
            raise BadShape(f"GPUs must be between 0 and {MAX_GPUS}", "gpus")
        if self.gpus == 0 and self.nodes < 1:
            raise BadShape("a CPU job needs at least one node", "nodes")
        if self.walltime_seconds <= 0:
            raise BadShape("the walltime must be longer than zero", "hours")

    @property
    def label(self) -> str:
        hours = Decimal(self.walltime_seconds) / 3600
        duration = f"{hours.normalize():f} h" if hours == hours.quantize(Decimal("0.01")) else f"{self.walltime_seconds} s"
        if self.gpus:
            return f"{self.gpus}×{(self.gpu_model or 'GPU').upper()}, {duration}"
        return f"{self.nodes} CPU node{'s' if self.nodes != 1 else ''}, {duration}"


@dataclass(frozen=True)
class Place:
    hardware: HardwareType
    nodes: int
    cost: budgets.Money | None  # the whole job in the budget's unit (None: no conversion set)
    reporting: budgets.Money | None  # the same in the site's reporting unit
    health: ClusterHealth | None  # the cluster's last health check (None: never checked)
    waiting: int | None  # jobs waiting where this job would wait (its partition, queue or cluster)
    same_model: bool  # the GPU model asked for (or none was asked for)
    missing: str = ""  # what the person lacks to run here (a linked account), "" when they can

    @property
    def cluster(self):
        return self.hardware.cluster

    @property
    def gpus(self) -> int:
        return self.hardware.gpus_per_node * self.nodes

    @property
    def is_cloud(self) -> bool:
        return is_cloud(self.hardware.cluster)

    @property
    def reachable(self) -> bool | None:
        return self.health.reachable if self.health is not None else None

    @property
    def expected_start(self) -> datetime | None:
        return self.health.expected_start if self.health is not None and self.health.reachable else None

    @property
    def busy(self) -> str:
        """How busy the place is now, in a few words, with how old the reading is."""
        health = self.health
        if health is None:
            return f"{self.waiting} waiting in its queue" if self.waiting is not None else "not checked yet"
        if not health.reachable:
            since = f" since {timezone.localtime(health.answered_at):%Y-%m-%d %H:%M}" if health.answered_at else ""
            return f"not answering{since}: {health.last_error}"[:300]
        parts = []
        waiting = self.waiting if self.waiting is not None else health.pending
        if waiting is not None:
            parts.append("nothing waiting" if waiting == 0 else f"{waiting} job{'s' if waiting != 1 else ''} waiting")
        if health.free_nodes is not None and health.total_nodes:
            parts.append(f"{health.free_nodes} of {health.total_nodes} nodes free")
        if health.expected_start is not None and waiting:
            parts.append(f"the waiting ones start by {timezone.localtime(health.expected_start):%H:%M}")
        return ", ".join(parts) or "answering"


def _nodes_for(hardware: HardwareType, shape: Shape) -> int | None:
    """Whole nodes of `hardware` that hold the shape, or None if it cannot."""
    if shape.gpus:
        if hardware.gpus_per_node <= 0:
            return None
        nodes = math.ceil(shape.gpus / hardware.gpus_per_node)
    else:
        if hardware.gpus_per_node:
            return None
        nodes = shape.nodes
    if nodes > hardware.max_nodes or shape.walltime_seconds > hardware.max_walltime_hours * 3600:
        return None
    return nodes


def places_for(project, shape: Shape, user=None, hardware: list[HardwareType] | None = None) -> list[Place]:
    """Every place `project` may run `shape`: where `user` (if given) can run first, each part cheapest first (in
    the reporting unit; unpriced last); the others say what is missing. `hardware`: the project's usable hardware
    (hardware_for_project), when the caller has it already."""
    budget = budget_of(project)
    reporting_unit = settings.KAKEHASHI_REPORTING_UNIT
    hardware = list(hardware_for_project(project)) if hardware is None else hardware
    healths = {h.cluster_id: h for h in ClusterHealth.objects.filter(cluster_id__in={hw.cluster_id for hw in hardware})}
    cloud_waiting: dict[int, int | None] = {}
    for gpus_per_node in {hw.gpus_per_node for hw in hardware if is_cloud(hw.cluster)}:
        if shape.gpus and gpus_per_node:
            nodes = math.ceil(shape.gpus / gpus_per_node)
        elif not shape.gpus and not gpus_per_node:
            nodes = shape.nodes
        else:
            continue
        for row in cloud_rows(project, gpus_per_node=gpus_per_node, nodes=nodes, walltime_seconds=shape.walltime_seconds):
            cloud_waiting[row.hardware.pk] = row.waiting
    places = []
    conversions: dict = {}  # each pair of units looked up once, not twice per place
    for hw in hardware:
        nodes = _nodes_for(hw, shape)
        if nodes is None or (is_cloud(hw.cluster) and hw.pk not in cloud_waiting):
            continue
        health = healths.get(hw.cluster_id)
        waiting = cloud_waiting.get(hw.pk)
        if waiting is None and health is not None and health.reachable:
            partition = (hw.scheduler_mapping or {}).get("partition") or (hw.scheduler_mapping or {}).get("queue")
            waiting = health.per_queue.get(partition, 0) if partition and health.per_queue else health.pending
        places.append(Place(
            hardware=hw, nodes=nodes,
            cost=cost_or_none(hw, nodes, shape.walltime_seconds, budget.unit if budget else hw.rate_unit, conversions),
            reporting=cost_or_none(hw, nodes, shape.walltime_seconds, reporting_unit, conversions),
            health=health, waiting=waiting,
            same_model=not shape.gpu_model or hw.gpu_model.lower() == shape.gpu_model.lower(),
        ))
    if user is not None:
        lacking = missing_accounts(user, project, [place.cluster for place in places])
        places = [replace(place, missing=lacking[place.cluster.pk]) for place in places]
    infinity = Decimal("Infinity")
    return sorted(places, key=lambda p: (bool(p.missing), p.reporting.amount if p.reporting else infinity,
                                         p.cost.amount if p.cost else infinity, p.hardware.slug))
