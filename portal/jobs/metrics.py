"""The documented way a job reports numbers: `outputs/metrics.json`, a flat JSON object of numbers
(`{"loss": 0.31, "accuracy": 0.92}`), read when the job's outputs are collected and shown on its sweep's page.

The file comes from the cluster, so it is untrusted: only names of letters, digits and `_.-/` (at most 64
characters) with finite numbers are kept, at most MAX_METRICS of them; anything else is left out.
"""

from __future__ import annotations

import json
import math
import re

METRICS_FILE = "metrics.json"  # relative to the job's outputs/ directory
MAX_METRICS = 50
MAX_BYTES = 64 * 1024
_NAME = re.compile(r"[A-Za-z0-9_.\-/]{1,64}")


def parse_metrics(raw: bytes) -> dict[str, float | int]:
    if len(raw) > MAX_BYTES:
        return {}
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    metrics: dict[str, float | int] = {}
    for name, value in data.items():
        if len(metrics) >= MAX_METRICS:
            break
        if not _NAME.fullmatch(name) or isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if isinstance(value, float) and not math.isfinite(value):
            continue
        metrics[name] = value
    return metrics


def format_metric(value: float | int | None) -> str:
    if value is None:
        return ""
    return str(value) if isinstance(value, int) else f"{value:.6g}"
