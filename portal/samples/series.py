"""A job's samples as a bounded series, and what they add up to. Pure functions over plain JSON values: no
database, so the bounds and the sums are tested alone and the same values go to the page, the API and the CLI.

The series (stored on `JobSamples.series`):

    {"gpus": {"node01/0": {"uuid": "GPU-…", "total": 81920, "p": [[t, dt, util_mean, util_max, mem_mean, power], …]}},
     "cpu":  {"node01": {"p": [[t, dt, cpu_percent, rss_mib], …], "last": [t, ticks], "hz": 100}},
     "nodes": {"node01": {"nvidia_smi": true, "errors": 0, "last_error": ""}},
     "interval": 30, "unreadable": 0}

A point covers [t, t + dt) seconds. Unknown values (nvidia-smi's [N/A]) stay None, never 0. Each device keeps at most
MAX_POINTS points: past that, the older half is merged pairwise (means weighted by time, maxima kept), so the recent
hours stay at full resolution and a 30-day job holds hundreds of points, not 86,400. Because each point keeps its
maximum, "some sample above the threshold" survives any merging: the idle rule never loses a busy moment.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from backends.sampling import Parsed

MAX_POINTS = 720

T, DT, UTIL, UTIL_MAX, MEM, POWER = range(6)


def _weighted(a: float | None, wa: int, b: float | None, wb: int) -> float | None:
    if a is None:
        return b
    if b is None:
        return a
    return round((a * wa + b * wb) / max(wa + wb, 1), 2)


def _max(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else max(a, b)


def merge_gpu(a: list, b: list) -> list:
    return [a[T], a[DT] + b[DT], _weighted(a[UTIL], a[DT], b[UTIL], b[DT]), _max(a[UTIL_MAX], b[UTIL_MAX]),
            _weighted(a[MEM], a[DT], b[MEM], b[DT]), _weighted(a[POWER], a[DT], b[POWER], b[DT])]


def merge_cpu(a: list, b: list) -> list:
    return [a[0], a[1] + b[1], _weighted(a[2], a[1], b[2], b[1]), _max(a[3], b[3])]


def bound(points: list[list], merge, limit: int = MAX_POINTS) -> list[list]:
    """At most `limit` points: merge the older half pairwise until they fit (the newest half untouched)."""
    while len(points) > limit:
        half = len(points) // 2
        older, newer = points[:half], points[half:]
        merged = [merge(older[i], older[i + 1]) if i + 1 < len(older) else older[i] for i in range(0, len(older), 2)]
        points = merged + newer
    return points


def add(series: dict, parsed: Parsed, node_hint: str = "") -> dict:
    """`series` with the parsed lines of one node file added (a new dict; the input is not changed)."""
    series = {"gpus": dict(series.get("gpus") or {}), "cpu": dict(series.get("cpu") or {}),
              "nodes": dict(series.get("nodes") or {}), "interval": series.get("interval") or 0,
              "unreadable": int(series.get("unreadable") or 0) + parsed.unreadable}
    node = parsed.headers[-1].node if parsed.headers else node_hint
    info = dict(series["nodes"].get(node) or {"nvidia_smi": False, "errors": 0, "last_error": ""})
    cpu = dict(series["cpu"].get(node) or {"p": [], "last": None, "hz": 100})
    for header in parsed.headers:
        info["nvidia_smi"] = header.nvidia_smi
        series["interval"] = header.interval or series["interval"]
        cpu["hz"] = header.hz
        cpu["last"] = None  # a restarted sampler counts ticks afresh
    interval = int(series["interval"] or 30)
    if parsed.errors:
        info["errors"] = int(info["errors"]) + len(parsed.errors)
        info["last_error"] = parsed.errors[-1][1][:200]
    points = list(cpu["p"])
    for sample in parsed.procs:
        last = cpu["last"]
        if last is not None and sample.t > last[0]:
            # Ticks of processes that ended meanwhile are gone from the sum: never below 0.
            used = max(sample.cpu_ticks - last[1], 0) / cpu["hz"]
            points.append([sample.t, interval, round(100 * used / (sample.t - last[0]), 1),
                           round(sample.rss_kb / 1024, 1)])
        elif last is None:
            points.append([sample.t, interval, None, round(sample.rss_kb / 1024, 1)])
        cpu["last"] = [sample.t, sample.cpu_ticks]
    cpu["p"] = bound(points, merge_cpu)
    by_device: dict[str, list] = {}
    for gpu in parsed.gpus:
        key = f"{node}/{gpu.index}"
        device = series["gpus"].get(key)
        if key not in by_device:
            device = dict(device or {"uuid": gpu.uuid, "total": gpu.memory_total_mib, "p": []})
            device["p"] = list(device["p"])
            series["gpus"][key] = device
            by_device[key] = device["p"]
        device = series["gpus"][key]
        device["total"] = gpu.memory_total_mib if gpu.memory_total_mib is not None else device.get("total")
        by_device[key].append([gpu.t, interval, gpu.utilization, gpu.utilization, gpu.memory_used_mib, gpu.power_w])
    for key, points in by_device.items():
        series["gpus"][key]["p"] = bound(points, merge_gpu)
    series["cpu"][node] = cpu
    series["nodes"][node] = info
    return series


def last_sample_at(series: dict) -> int | None:
    """The time of the newest sample of any node (epoch seconds), None without any."""
    times = [d["p"][-1][T] for d in (series.get("gpus") or {}).values() if d.get("p")]
    times += [c["p"][-1][0] for c in (series.get("cpu") or {}).values() if c.get("p")]
    return max(times) if times else None


@dataclass(frozen=True)
class GpuFigures:
    device: str
    mean: float | None
    max: float | None


@dataclass(frozen=True)
class Summary:
    gpus: list[GpuFigures]
    gpu_hours_reserved: float
    gpu_hours_sampled: float
    gpu_hours_used: float  # utilisation-weighted: 2 h at 50 % is 1 GPU-hour used
    gpu_hours_idle: float  # sampled time of GPUs below the threshold
    idle_cost: float  # in the budget's unit: idle GPU-hours × the hardware's rate per GPU-hour
    unit: str
    efficiency: float | None  # used / reserved
    cpu_percent_mean: float | None
    rss_mib_max: float | None
    nodes_without_gpu_tool: list[str]

    def as_dict(self) -> dict:
        return {"gpus": [{"device": g.device, "mean": g.mean, "max": g.max} for g in self.gpus],
                "gpu_hours_reserved": round(self.gpu_hours_reserved, 4),
                "gpu_hours_sampled": round(self.gpu_hours_sampled, 4),
                "gpu_hours_used": round(self.gpu_hours_used, 4), "gpu_hours_idle": round(self.gpu_hours_idle, 4),
                "idle_cost": round(self.idle_cost, 4), "unit": self.unit,
                "efficiency": None if self.efficiency is None else round(self.efficiency, 4),
                "cpu_percent_mean": self.cpu_percent_mean, "rss_mib_max": self.rss_mib_max,
                "nodes_without_gpu_tool": self.nodes_without_gpu_tool}


def _mean(pairs: Iterable[tuple[float | None, int]]) -> float | None:
    known = [(v, w) for v, w in pairs if v is not None]
    weight = sum(w for _, w in known)
    return round(sum(v * w for v, w in known) / weight, 1) if weight else None


def summarise(series: dict, *, threshold: float, reserved_gpu_hours: float, rate_per_gpu_hour: float,
              unit: str) -> Summary:
    """What the series adds up to: per-GPU mean and max, GPU-hours used and idle, and what the idle ones cost."""
    figures, sampled, used, idle = [], 0.0, 0.0, 0.0
    for device, data in sorted((series.get("gpus") or {}).items()):
        points = data.get("p") or []
        figures.append(GpuFigures(device, _mean((p[UTIL], p[DT]) for p in points),
                                  max((p[UTIL_MAX] for p in points if p[UTIL_MAX] is not None), default=None)))
        for p in points:
            if p[UTIL] is None:
                continue  # unknown (MIG, [N/A]): neither used nor idle
            sampled += p[DT]
            used += p[DT] * p[UTIL] / 100
            if p[UTIL_MAX] < threshold:
                idle += p[DT]
    sampled, used, idle = sampled / 3600, used / 3600, idle / 3600  # seconds summed first: exact in float
    cpus = [p for c in (series.get("cpu") or {}).values() for p in c.get("p") or []]
    without = sorted(node for node, info in (series.get("nodes") or {}).items() if not info.get("nvidia_smi"))
    return Summary(figures, reserved_gpu_hours, sampled, used, idle, idle * rate_per_gpu_hour, unit,
                   used / reserved_gpu_hours if reserved_gpu_hours else None,
                   _mean((p[2], p[1]) for p in cpus), max((p[3] for p in cpus if p[3] is not None), default=None),
                   without)


def idle_periods(series: dict, threshold: float) -> list[tuple[int, int]]:
    """The stretches [start, end) (epoch seconds) when every GPU's samples were below the threshold: the chart
    shades them. A moment with an unknown or busy GPU, or with no GPU sample at all, is not idle."""
    moments: dict[int, list] = {}
    for data in (series.get("gpus") or {}).values():
        for p in data.get("p") or []:
            moments.setdefault(p[T], []).append(p)
    periods: list[tuple[int, int]] = []
    for t in sorted(moments):
        points = moments[t]
        if all(p[UTIL_MAX] is not None and p[UTIL_MAX] < threshold for p in points):
            end = t + max(p[DT] for p in points)
            if periods and periods[-1][1] >= t:
                periods[-1] = (periods[-1][0], max(end, periods[-1][1]))
            else:
                periods.append((t, end))
    return periods
