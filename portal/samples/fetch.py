"""Bringing samples home beside the tracking cycle (worker side; a beat task at the sample interval): per cluster,
one command per cluster account
whose jobs run there (the monitor identity may not read other users' job directories; a site whose jobs run under
one account gets one round trip per cycle), each job's new whole lines from its offsets, added to its bounded
series, summed up, and judged by the idle rule (portal/samples/actions.py).

Running jobs are read every cycle; a job that ended is read once more for its last samples, then left. Running
interactive sessions are judged with their JupyterLab's last activity too, read from the hub once a cycle
(portal/sessions/activity.py: one request per hub user), which the sessions app gives this module when it is ready
(`tell_activity_with`): the sessions app depends on this one, never the other way round.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from backends.base import BackendError, TransportError
from backends.sampling import FetchRequest, parse_samples
from portal.clusters.connect import NoClusterAccount, account_for, backend_for
from portal.clusters.models import Cluster
from portal.jobs.models import FINAL_STATES, Job, JobState
from portal.samples import actions, series
from portal.samples.models import JobSamples
from portal.samples.policy import rule_for_project

logger = logging.getLogger(__name__)
FINAL_READ_WITHIN = timedelta(hours=1)  # a job that ended longer ago is not read again
READ_LIMIT = 256 * 1024  # bytes per node file per cycle: a backlog is read over several cycles


# job ids → their session server's last activity (epoch seconds); ids it cannot tell are left out (never idle).
ActivityReader = Callable[[Iterable[int]], dict[int, int]]
_activity_readers: list[ActivityReader] = []


def tell_activity_with(reader: ActivityReader) -> None:
    """Have the sessions' last activity read by `reader` every cycle (portal/sessions/apps.py, at start)."""
    if reader not in _activity_readers:
        _activity_readers.append(reader)


def sessions_activity(job_ids: list[int]) -> dict[int, int]:
    found: dict[int, int] = {}
    if job_ids:
        for reader in _activity_readers:
            found.update(reader(job_ids))
    return found


@dataclass
class WatchReport:
    jobs: int = 0
    round_trips: int = 0
    bytes: int = 0
    warned: int = 0
    cancelled: int = 0
    errors: list[str] = field(default_factory=list)


def watched_jobs(cluster: Cluster) -> list[Job]:
    """Running jobs, and jobs that ended lately whose last samples are not read yet."""
    ended_lately = (Q(state__in=FINAL_STATES, ended_at__gte=timezone.now() - FINAL_READ_WITHIN,
                      started_at__isnull=False) & ~Q(samples__complete=True))
    return list(Job.objects.filter(cluster=cluster).exclude(remote_dir="").exclude(scheduler_id="")
                .filter(Q(state=JobState.RUNNING) | ended_lately)
                .select_related("user", "project", "hardware", "cluster", "session").order_by("pk"))


def clusters_to_watch() -> list[int]:
    running = Job.objects.filter(state=JobState.RUNNING).exclude(scheduler_id="").values_list("cluster_id", flat=True)
    ended = (JobSamples.objects.filter(complete=False, job__state__in=FINAL_STATES,
                                       job__ended_at__gte=timezone.now() - FINAL_READ_WITHIN)
             .values_list("job__cluster_id", flat=True))
    return sorted(set(running) | set(ended))


def watch_cluster(cluster_id: int) -> WatchReport:
    report = WatchReport()
    cluster = Cluster.objects.get(pk=cluster_id)
    jobs = watched_jobs(cluster)
    by_account: dict[object, list[Job]] = defaultdict(list)
    accounts: dict[tuple[int, int], object] = {}  # (user, project) → account: asked once a cycle, not once a job
    for job in jobs:
        key = (job.user_id, job.project_id)
        if key not in accounts:
            try:
                accounts[key] = account_for(cluster, job.user, job.project)
            except NoClusterAccount:
                accounts[key] = NoClusterAccount
        if accounts[key] is not NoClusterAccount:
            by_account[accounts[key]].append(job)
    offsets = dict(JobSamples.objects.filter(job__in=jobs).values_list("job_id", "offsets"))
    rules: dict[int, object] = {}
    read: list[tuple[Job, dict, object, int | None]] = []
    used = sessions_activity([job.pk for job in jobs if job.kind == Job.Kind.SESSION and job.state == JobState.RUNNING])
    for account, group in by_account.items():
        requests = [FetchRequest(str(job.pk), job.remote_dir, offsets.get(job.pk) or {}) for job in group]
        try:
            found = backend_for(cluster, account).read_samples(requests, READ_LIMIT)
        except (BackendError, TransportError) as exc:
            # Nothing concluded from silence: these jobs' samples go stale, which the rule reads as "unknown".
            report.errors.append(str(exc)[:300])
            continue
        report.round_trips += 1
        for job in group:
            report.jobs += 1
            chunks = found.get(str(job.pk), {})
            report.bytes += sum(len(c.text) for c in chunks.values())
            if job.project_id not in rules:  # read once per project per cycle
                rules[job.project_id] = rule_for_project(job.project)
            read.append((job, chunks, rules[job.project_id], used.get(job.pk)))
    outcome = record_all(read)
    report.warned += outcome.warned
    report.cancelled += outcome.cancelled
    return report


def record(job: Job, chunks: dict, rule=None, last_activity: int | None = None) -> actions.Outcome:
    """One job's new bytes added, summed up and judged: `record_all` for one (a session's `last_activity` on the
    hub beside its samples)."""
    return record_all([(job, chunks, rule or rule_for_project(job.project), last_activity)])


# What a cycle writes back: everything for a job with new bytes; for one without, its series and offsets stay
# (rewriting an unchanged series is most of what a quiet cycle would cost).
GROWN_FIELDS = ["series", "offsets", "fetched_at", "last_sample_at", "summary", "complete", "state", "state_why",
                "idle_since", "warned"]
JUDGED_FIELDS = ["fetched_at", "summary", "complete", "state", "state_why", "idle_since", "warned"]
UPDATE_BATCH = 500


def record_all(read: list[tuple[Job, dict, object, int | None]]) -> actions.Outcome:
    """`record` for every job a cycle read, in a few statements whatever their number: their rows locked by one
    SELECT … FOR UPDATE (in job order: two readers never deadlock), the missing ones made by one INSERT, each
    job's new bytes added, summed up and judged as `record` does, and the rows saved by one UPDATE per
    UPDATE_BATCH jobs. A warning or a cancel the rule orders still writes its own event and notice. Each entry:
    the job, its new chunks, its project's rule, and (a running session) its server's last activity on the hub."""
    outcome = actions.Outcome()
    if not read:
        return outcome
    now = timezone.now()
    ids = [job.pk for job, _, _, _ in read]
    with transaction.atomic():
        locked = JobSamples.objects.select_for_update().order_by("job_id")
        rows = {samples.job_id: samples for samples in locked.filter(job_id__in=ids)}
        if missing := [pk for pk in ids if pk not in rows]:
            JobSamples.objects.bulk_create([JobSamples(job_id=pk) for pk in missing], ignore_conflicts=True)
            rows.update({samples.job_id: samples for samples in locked.filter(job_id__in=missing)})
        grown, judged = [], []
        for job, chunks, rule, last_activity in read:
            samples = rows[job.pk]
            samples.job = job  # the job as this cycle read it: no statement per row to fetch it again
            data, offsets = samples.series or {}, dict(samples.offsets or {})
            added = False
            for name, chunk in sorted(chunks.items()):
                if chunk.start != int(offsets.get(name, 0)):
                    continue  # read against an older offset (two readers): the next cycle reads it again
                data = series.add(data, parse_samples(chunk.text), node_hint=name.removesuffix(".log"))
                offsets[name] = chunk.start + len(chunk.text)
                added = True
            samples.fetched_at = now
            if added:
                samples.series, samples.offsets = data, offsets
                last = series.last_sample_at(data)
                samples.last_sample_at = datetime.fromtimestamp(last, UTC) if last else None
            samples.summary = summary_of(job, data, rule.threshold_percent, now)
            samples.complete = job.state in FINAL_STATES
            done = actions.judge_and_act(job, samples, rule, now, last_activity)
            outcome.warned += done.warned
            outcome.cancelled += done.cancelled
            (grown if added else judged).append(samples)
        _save(grown, GROWN_FIELDS)
        _save(judged, JUDGED_FIELDS)
    return outcome


def _save(rows: list[JobSamples], names: list[str]) -> None:
    """UPDATE … FROM (VALUES …): one statement per UPDATE_BATCH rows. Django's bulk_update builds a CASE of one
    WHEN per row and field, which cost a 1,000-job cycle more CPU than everything else in it (bench/watch.py)."""
    if connection.vendor != "postgresql":
        # make run's SQLite has no casts in VALUES: Django's own bulk update (a few jobs on one machine).
        JobSamples.objects.bulk_update(rows, names, batch_size=UPDATE_BATCH)
        return
    fields = [JobSamples._meta.get_field(name) for name in names]
    key = JobSamples._meta.pk
    columns = [key, *fields]
    casts = ", ".join(f"%s::{field.db_type(connection)}" for field in columns)
    assign = ", ".join(f"{connection.ops.quote_name(f.column)} = v.{connection.ops.quote_name(f.column)}"
                       for f in fields)
    names_sql = ", ".join(connection.ops.quote_name(f.column) for f in columns)
    table, pk = connection.ops.quote_name(JobSamples._meta.db_table), connection.ops.quote_name(key.column)
    for start in range(0, len(rows), UPDATE_BATCH):
        batch = rows[start:start + UPDATE_BATCH]
        params = [value for row in batch for value in
                  (row.pk, *(f.get_db_prep_save(getattr(row, f.attname), connection) for f in fields))]
        values = ", ".join([f"({casts})"] * len(batch))
        # Only the model's own table, column and type names are in the text; every value is a parameter.
        sql = f"UPDATE {table} AS t SET {assign} FROM (VALUES {values}) AS v({names_sql}) WHERE t.{pk} = v.{pk}"  # noqa: S608
        with connection.cursor() as cursor:
            cursor.execute(sql, params)


def summary_of(job: Job, data: dict, threshold: float, now) -> dict:
    hardware = job.hardware
    gpus = (hardware.gpus_per_node if hardware else 0) * job.nodes
    started = job.started_at
    elapsed = job.elapsed_seconds if job.elapsed_seconds is not None else (
        max((now - started).total_seconds(), 0) if started else 0)
    reserved = gpus * elapsed / 3600
    # The price of one GPU-hour in the budget's unit, from what was reserved for the whole walltime (the same
    # conversion the estimate used).
    price = 0.0
    if job.estimate_amount and gpus and job.walltime_seconds:
        price = float(job.estimate_amount) / (gpus * job.walltime_seconds / 3600)
    return series.summarise(data, threshold=threshold, reserved_gpu_hours=reserved, rate_per_gpu_hour=price,
                            unit=job.estimate_unit).as_dict()
