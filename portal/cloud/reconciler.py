"""Nothing left running in the cloud: the reconciler compares what AWS runs in the portal's queues with the portal.

Every `KAKEHASHI_CLOUD_RECONCILE_INTERVAL` seconds (beat) each AWS Batch cluster is asked for every job not
ended in its queues (list_jobs, then describe_jobs for tags and sizes). A job the portal does not know (by its
id, or by its name while a dispatch has submitted it but not recorded its id yet: job and sweep rows are
committed before their dispatch starts), one the portal recorded as ended, and one running past its walltime
(Batch's own timeout should have stopped it; `KAKEHASHI_CLOUD_GRACE_SECONDS` covers its kill) are stopped, each
in the audit log with its tags. What runs, whose it is and what
it burns per hour is kept for /site/ (a web request never asks AWS: docs/decisions/0004).
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.core.cache import cache
from django.db.models import Q
from django.utils import timezone

from backends.aws_batch_defs import RECONCILER_REASON, TAG_PREFIX, WALLTIME_REASON
from backends.base import BackendError, TransportError
from portal.audit.actions import record
from portal.budgets.actions import NoConversion, convert
from portal.budgets.display import amount_text
from portal.clusters.cloud_state import last_seen, queues_of, snapshot_key
from portal.clusters.connect import backend_for, cloud_kinds
from portal.clusters.models import Cluster
from portal.jobs import events
from portal.jobs.actions.cancel import cancel_by_reconciler
from portal.jobs.models import FINAL_STATES, Job, JobGroup
from portal.samples.queries import still_computing

log = logging.getLogger(__name__)
# A job the portal does not know has no samples it reads (its container, if it is ours at all, pushes none it asks).
STRAY = {"state": "stray", "text": "not a portal job: nothing samples it", "idle_since": None, "read_at": None}


@dataclass
class Sighting:
    """One job AWS runs in a portal queue, as /site/ shows it."""

    scheduler_id: str
    name: str
    status: str
    hardware: str
    nodes: int
    started_at: str  # ISO time, or "" while it waits
    project: str
    user: str
    job_id: int | None  # the portal's job, if it knows it
    burn_per_hour: str  # price × nodes, in the price's currency
    burn_unit: str
    burn_reporting: str = ""  # the same in the site's reporting unit, where a conversion is set
    action: str = ""  # what the reconciler did about it ("" = nothing: it is the portal's and in time)


@dataclass
class Reconciliation:
    cluster: str
    at: str
    running: list[Sighting] = field(default_factory=list)
    stopped: list[Sighting] = field(default_factory=list)
    waiting: dict[str, int] = field(default_factory=dict)  # queue → jobs waiting for capacity (how busy it is)
    error: str = ""


def reconcile(cluster: Cluster, now: datetime | None = None) -> Reconciliation:
    now = now or timezone.now()
    report = Reconciliation(cluster=cluster.slug, at=now.isoformat())
    queues = queues_of(cluster)
    try:
        backend = backend_for(cluster)
        running = backend.active_jobs(list(queues))
    except (BackendError, TransportError) as exc:
        report.error = str(exc)
        cache.set(snapshot_key(cluster.pk), asdict(report), timeout=None)
        return report
    ids = [job.scheduler_id for job in running]
    names = [job.name for job in running]
    portal_jobs = Job.objects.filter(cluster=cluster).filter(Q(scheduler_id__in=ids) | Q(scheduler_name__in=names))
    by_id = {job.scheduler_id: job for job in portal_jobs.select_related("project", "user", "hardware") if job.scheduler_id}
    in_flight = {job.scheduler_name for job in portal_jobs if not job.scheduler_id}
    in_flight |= set(JobGroup.objects.filter(scheduler_name__in=names, scheduler_id="").values_list("scheduler_name", flat=True))
    arrays = {g.scheduler_id: g for g in JobGroup.objects.filter(scheduler_id__in=ids).select_related("project", "user")}
    grace = timedelta(seconds=settings.KAKEHASHI_CLOUD_GRACE_SECONDS)
    report.waiting = {queue: 0 for queue in queues}
    for cloud_job in running:
        job = by_id.get(cloud_job.scheduler_id)
        group = arrays.get(cloud_job.scheduler_id)
        hardware = job.hardware if job is not None and job.hardware else queues.get(cloud_job.queue)
        sighting = _sighting(cloud_job, job, group, hardware)
        why = ""
        if job is None and group is None:
            if cloud_job.name not in in_flight:
                why = f"{RECONCILER_REASON}: not a job the portal knows"
        elif job is not None and job.state in FINAL_STATES:
            why = f"{RECONCILER_REASON}: the portal recorded it as {job.state}"
        elif job is not None and cloud_job.started_at is not None and \
                now - cloud_job.started_at > timedelta(seconds=job.walltime_seconds) + grace:
            why = f"{WALLTIME_REASON} of {job.walltime_seconds} s"
        if why:
            if job is not None and job.state not in FINAL_STATES:
                # The job's history and its owner say the reconciler stopped it, and why (its cause, not these words).
                cancel_by_reconciler(job.pk, events.by_reconciler(why.removeprefix(f"{RECONCILER_REASON}: ")))
            _stop(backend, cluster, cloud_job, sighting, job, why)
            report.stopped.append(sighting)
        else:
            report.running.append(sighting)
            if cloud_job.status in ("SUBMITTED", "PENDING", "RUNNABLE"):
                report.waiting[cloud_job.queue] = report.waiting.get(cloud_job.queue, 0) + 1
    cache.set(snapshot_key(cluster.pk), asdict(report), timeout=None)
    return report


def _stop(backend, cluster: Cluster, cloud_job, sighting: Sighting, job: Job | None, why: str) -> None:
    try:
        backend.cancel(cloud_job.scheduler_id, reason=why)
        sighting.action = why.removeprefix(f"{RECONCILER_REASON}: ")
    except (BackendError, TransportError) as exc:
        sighting.action = f"could not stop it: {exc}"
    log.warning("cloud reconciler on %s: %s %s (%s): %s", cluster.slug, cloud_job.scheduler_id, cloud_job.name,
                dict(cloud_job.tags), sighting.action)
    record("cloud.job_stopped", project=job.project if job is not None else None, target=cluster,
           scheduler_id=cloud_job.scheduler_id, name=cloud_job.name, status=cloud_job.status, queue=cloud_job.queue,
           tags=dict(cloud_job.tags), job=job.pk if job is not None else None, done=sighting.action)


def _sighting(cloud_job, job: Job | None, group: JobGroup | None, hardware) -> Sighting:
    owner = job or group
    tags = cloud_job.tags
    rate = Decimal(hardware.rate) if hardware is not None else Decimal(0)
    unit = hardware.rate_unit if hardware is not None else ""
    burn = rate * cloud_job.nodes if cloud_job.started_at is not None else Decimal(0)
    reporting = ""
    if hardware is not None and burn:
        try:
            reporting = f"{amount_text(convert(burn, unit, settings.KAKEHASHI_REPORTING_UNIT))} {settings.KAKEHASHI_REPORTING_UNIT}"
        except NoConversion:
            reporting = ""
    return Sighting(
        scheduler_id=cloud_job.scheduler_id, name=cloud_job.name, status=cloud_job.status,
        hardware=hardware.name if hardware is not None else cloud_job.queue, nodes=cloud_job.nodes,
        started_at=cloud_job.started_at.isoformat() if cloud_job.started_at else "",
        project=owner.project.slug if owner is not None else tags.get(f"{TAG_PREFIX}project", "?"),
        user=owner.user.username if owner is not None else tags.get(f"{TAG_PREFIX}user", "?"),
        job_id=job.pk if job is not None else None,
        burn_per_hour=amount_text(burn), burn_unit=unit, burn_reporting=reporting,
    )


def reconcile_all() -> list[Reconciliation]:
    return [reconcile(cluster) for cluster in Cluster.objects.filter(kind__in=cloud_kinds(), enabled=True).order_by("pk")]


def cloud_now() -> list[dict]:
    """What the reconcilers last saw on each AWS cluster (for /site/): never asks AWS itself."""
    snapshots = []
    for cluster in Cluster.objects.filter(kind__in=cloud_kinds()).order_by("name"):
        snapshots.append({"cluster": cluster, "seen": last_seen(cluster)})
    # "Still computing?" from each portal job's samples as last judged (read now, not when AWS was asked): one
    # statement for every row of every cluster.
    rows = [s for snap in snapshots if snap["seen"] for s in snap["seen"]["running"] + snap["seen"]["stopped"]]
    answers = still_computing(s["job_id"] for s in rows)
    for s in rows:
        s["computing"] = answers[s["job_id"]] if s["job_id"] is not None else STRAY
    return snapshots
