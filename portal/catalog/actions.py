"""Catalog changes that follow from jobs: a finished health check updates its hardware type's measured speed
(the job's side, reading its health.json on the cluster, is in portal/jobs/outputs.py)."""

from __future__ import annotations

import json
import math

from django.db import transaction

from portal.audit.actions import record
from portal.catalog.models import HardwareType

HEALTH_FILE = "outputs/health.json"
_NUMBERS = ("tflops", "tflops_total", "slowest_tflops", "busbw_gbps")


class BadHealthReport(ValueError):
    pass


def parse_health(raw: bytes) -> dict:
    """The fields we keep from a health.json, each checked: it comes from a job, so it is untrusted."""
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadHealthReport(f"health.json is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BadHealthReport("health.json is not an object")
    kept: dict = {}
    for key in _NUMBERS:
        value = data.get(key)
        if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value) or value < 0:
            raise BadHealthReport(f"health.json: {key} must be a non-negative number")
        kept[key] = float(value)
    for key in ("mode", "device", "measured_at", "torch"):
        kept[key] = str(data.get(key, ""))[:100]
    kept["world_size"] = int(data.get("world_size") or 0)
    kept["nvidia_smi"] = [str(line)[:200] for line in (data.get("nvidia_smi") or [])[:16]]
    return kept


def record_measurement(hardware: HardwareType, measured: dict, *, project, job_id: int) -> None:
    """Store a health check's measurements with its hardware type (what the site page and the API show)."""
    with transaction.atomic():
        HardwareType.objects.filter(pk=hardware.pk).update(measured=measured)
        record("hardware.measured", project=project, target=hardware, job=job_id, tflops=measured["tflops"])
