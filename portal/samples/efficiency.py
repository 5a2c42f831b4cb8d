"""GPU efficiency for the usage pages: useful GPU-hours over reserved GPU-hours, per project, user and hardware
type, summed from each sampled job's summary (portal/samples/series.py). Jobs without samples are left out and
counted apart: nothing is guessed for them."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from portal.samples.models import JobSamples


@dataclass
class EfficiencyRow:
    project: str
    user: str
    hardware: str
    jobs: int = 0
    reserved: float = 0.0
    used: float = 0.0
    idle: float = 0.0
    idle_cost: float = 0.0
    unit: str = ""

    @property
    def efficiency(self) -> float | None:
        return self.used / self.reserved if self.reserved else None


def efficiency_rows(project_ids: list[int]) -> list[EfficiencyRow]:
    rows: dict[tuple[str, str, str, str], EfficiencyRow] = {}
    found = (JobSamples.objects.filter(job__project_id__in=project_ids).exclude(summary={})
             .values_list("job__project__slug", "job__user__username", "job__hardware__slug", "summary"))
    for project, user, hardware, summary in found.iterator(chunk_size=2000):
        if not summary.get("gpu_hours_reserved"):
            continue
        unit = summary.get("unit") or ""
        key = (project, user, hardware or "", unit)
        row = rows.get(key) or rows.setdefault(key, EfficiencyRow(project, user, hardware or "", unit=unit))
        row.jobs += 1
        row.reserved += summary["gpu_hours_reserved"]
        row.used += summary.get("gpu_hours_used") or 0
        row.idle += summary.get("gpu_hours_idle") or 0
        row.idle_cost += summary.get("idle_cost") or 0
    return sorted(rows.values(), key=lambda r: (r.project, r.user, r.hardware, r.unit))


def totals(rows: list[EfficiencyRow], by: str) -> list[EfficiencyRow]:
    """The rows summed by one of "project", "user", "hardware" (and unit)."""
    summed: dict[tuple[str, str], EfficiencyRow] = defaultdict(lambda: EfficiencyRow("", "", ""))
    for r in rows:
        total = summed[(getattr(r, by), r.unit)]
        setattr(total, by, getattr(r, by))
        total.unit = r.unit
        total.jobs += r.jobs
        total.reserved += r.reserved
        total.used += r.used
        total.idle += r.idle
        total.idle_cost += r.idle_cost
    return sorted(summed.values(), key=lambda r: (getattr(r, by), r.unit))
