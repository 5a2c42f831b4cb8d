"""Catalog changes that follow from jobs: a finished health check updates its hardware type's measured speed."""

from __future__ import annotations

import json
import math

from django.db import transaction

from portal.audit.actions import record
from portal.catalog.models import HardwareType
from portal.clusters.connect import account_for, backend_for

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


def record_health_check(job_id: int) -> dict | None:
    """Fetch a finished health-check job's result from the cluster and store it with the hardware (worker side)."""
    from portal.jobs.models import Job, JobState

    job = Job.objects.select_related("cluster", "hardware", "project", "user").get(pk=job_id)
    if job.state != JobState.COMPLETED or job.hardware is None:
        return None
    backend = backend_for(job.cluster, account_for(job.cluster, job.user, job.project))
    raw = backend.transport.read_file(f"{job.remote_dir}/{HEALTH_FILE}", limit=256 * 1024)
    if not raw:
        return None
    measured = {**parse_health(raw), "job": job.pk, "nodes": job.nodes}
    with transaction.atomic():
        HardwareType.objects.filter(pk=job.hardware_id).update(measured=measured)
        record("hardware.measured", project=job.project, target=job.hardware, job=job.pk, tflops=measured["tflops"])
    return measured
