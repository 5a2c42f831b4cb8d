"""The sweep page's table: each point's parameters as key=value, state, how long it ran, cost and the metrics it
reported (outputs/metrics.json), for the page of points shown, beside the whole sweep's totals (summed by
PostgreSQL: portal.jobs.queries.sweep_totals). Plain functions over jobs already loaded."""

from __future__ import annotations

import json
from dataclasses import dataclass

from django.utils import timezone

from portal.jobs.listing import format_duration, run_duration
from portal.jobs.metrics import format_metric
from portal.jobs.models import Job
from portal.jobs.queries import SweepTotals


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
    rows: list[SweepRow]  # the page's points
    metric_names: list[str]  # what the page's points reported
    totals: SweepTotals  # the whole sweep's


def sweep_table(jobs: list[Job], totals: SweepTotals) -> SweepTable:
    now = timezone.now()
    names = sorted({name for job in jobs for name in (job.metrics or {})})
    rows = [SweepRow(
        job=job,
        parameters=[(key, parameter_text(value)) for key, value in (job.parameters or {}).items()],
        duration=format_duration(run_duration(job, now)),
        metrics=[format_metric((job.metrics or {}).get(name)) for name in names],
    ) for job in jobs]
    return SweepTable(rows, names, totals)
