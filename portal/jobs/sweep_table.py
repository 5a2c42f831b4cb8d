"""The sweep page's table: each point's parameters as key=value, state, how long it ran, cost and the metrics it
reported (outputs/metrics.json), with the sweep's total. Plain functions over jobs already loaded."""

from __future__ import annotations

import json
from dataclasses import dataclass
from decimal import Decimal

from django.utils import timezone

from portal.jobs.listing import format_duration, run_duration
from portal.jobs.metrics import format_metric
from portal.jobs.models import Job


def parameter_text(value) -> str:
    """A parameter's value as typed: text as is, numbers and true/false as JSON writes them."""
    return value if isinstance(value, str) else json.dumps(value)


@dataclass
class SweepRow:
    job: Job
    parameters: list[tuple[str, str]]
    duration: str
    metrics: list[str]  # in the table's metric order; "" where the job reported none


@dataclass
class SweepTable:
    rows: list[SweepRow]
    metric_names: list[str]
    settled: Decimal  # what the ended points cost
    reserved: Decimal  # still reserved for points not settled yet
    unit: str

    @property
    def total(self) -> Decimal:
        return self.settled + self.reserved


def sweep_table(jobs: list[Job]) -> SweepTable:
    now = timezone.now()
    names = sorted({name for job in jobs for name in (job.metrics or {})})
    rows, settled, reserved = [], Decimal(0), Decimal(0)
    for job in jobs:
        if job.cost_amount is not None:
            settled += job.cost_amount
        elif job.estimate_amount is not None and not job.is_final:
            reserved += job.estimate_amount
        rows.append(SweepRow(
            job=job,
            parameters=[(key, parameter_text(value)) for key, value in (job.parameters or {}).items()],
            duration=format_duration(run_duration(job, now)),
            metrics=[format_metric((job.metrics or {}).get(name)) for name in names],
        ))
    unit = next((job.estimate_unit for job in jobs if job.estimate_unit), "")
    return SweepTable(rows, names, settled, reserved, unit)
