"""Bringing a job's output home (worker side): stdout/stderr as it grows, and at the end what it left in outputs/
and, for a health check, its measurements.

Web requests never reach a cluster (docs/decisions/0004): they read what a worker fetched, and ask for more
with `request_output_refresh`. Names come from the cluster, so they are untrusted: any relative path that is a
valid object key under the job is kept (UTF-8, spaces and any script: `run 1/log.txt`, `結果.csv`), and a name with
control characters, one that is not UTF-8, or one too long for a key is not. The backend lists without following
symbolic links (a link is never read, so nothing outside outputs/ comes back through one), at most
KAKEHASHI_OUTPUT_MAX_FILES entries and KAKEHASHI_OUTPUT_MAX_DEPTH levels. Whatever is left out is counted and said
in `Job.outputs_not_collected`, which the job's page and the API show: nothing is dropped silently.

With an object store, every file of outputs/ is streamed into it under the job (`jobs/<uuid>/outputs/`) and
downloaded by presigned GETs; on the portal's disk (`make run`) files are copied up to a per-job budget
(KAKEHASHI_OUTPUT_COPY_BYTES) and larger ones are listed and stay on the cluster.
"""

from __future__ import annotations

import unicodedata
from collections import Counter
from dataclasses import dataclass

from django.conf import settings
from django.core.cache import cache
from django.db import transaction
from django.utils import timezone

from backends.base import OUTPUTS_DIR
from portal.catalog.actions import HEALTH_FILE, parse_health, record_measurement
from portal.clusters.connect import account_for, backend_for
from portal.enqueue import FETCH_OUTPUT, enqueue
from portal.jobs import locks, transitions
from portal.jobs.metrics import METRICS_FILE, parse_metrics
from portal.jobs.models import FINAL_STATES, Job, JobArtifact, JobOutput, JobState
from portal.storage import objectstore
from portal.storage.actions import save_job_output, stream_job_output

OUTPUT_CAP = 8 * 1024 * 1024  # bytes of each stream kept in the portal; the rest stays on the cluster
KEY_BYTES = 1024  # S3's longest key
PATH_CHARS = JobArtifact._meta.get_field("path").max_length


def key_problem(job_uuid, path: str) -> str | None:
    """Why `path` (relative to outputs/, as a backend listed it) cannot be kept as `jobs/<uuid>/outputs/<path>`,
    in words that complete "N files not collected: ..."; None if it can."""
    if "\ufffd" in path:  # the transport decoded bytes that are not UTF-8 as U+FFFD
        return "names that are not valid UTF-8"
    if any(unicodedata.category(ch) in ("Cc", "Cs") or ch in "\ufffe\uffff" for ch in path):
        return "names with control characters"
    if path.startswith("/") or any(part in ("", ".", "..") for part in path.split("/")):
        return "names that are not plain relative paths"
    if len(path) > PATH_CHARS or len(f"jobs/{job_uuid}/outputs/{path}".encode()) > KEY_BYTES:
        return "names too long for an object key"
    return None


def _not_collected(skipped: Counter, listing, limit: int, depth: int) -> list[str]:
    """The sentences the job's page and the API show for what of outputs/ did not come back."""
    notes = [f"{n} file{'s' if n != 1 else ''} not collected: {reason}" for reason, n in sorted(skipped.items())]
    if listing.outputs_link:
        notes.append("outputs/ is a symbolic link: links are not followed, so nothing was collected")
    if listing.more:
        notes.append(f"only the first {limit} files were collected (KAKEHASHI_OUTPUT_MAX_FILES)")
    if listing.deeper:
        notes.append(f"files more than {depth} folders deep were not collected (KAKEHASHI_OUTPUT_MAX_DEPTH)")
    return notes


def _backend(job: Job):
    return backend_for(job.cluster, account_for(job.cluster, job.user, job.project))


def request_output_refresh(job: Job, min_interval: float = 2.0) -> bool:
    """Ask a worker to fetch new output of a job, at most once per `min_interval` seconds per job."""
    if not job.scheduler_id:
        return False
    if cache.add(f"kakehashi:fetch-output:{job.pk}", 1, timeout=min_interval):
        enqueue(FETCH_OUTPUT, job.pk)
        return True
    return False


def fetch_output(job_id: int) -> dict[str, int]:
    """Copy new stdout/stderr bytes from the cluster into JobOutput (worker side). Returns bytes added.

    The JobOutput rows are locked while a fetch reads and appends, so a refresh that races with the final fetch
    can neither append the same bytes twice nor mark a complete output incomplete again.
    """
    job = Job.objects.select_related("cluster", "project", "user").get(pk=job_id)
    if not job.remote_dir or not job.scheduler_id:
        return {}
    final = job.state in FINAL_STATES
    backend = _backend(job)
    added = {}
    for stream in ("stdout", "stderr"):
        JobOutput.objects.get_or_create(job=job, stream=stream)
        with transaction.atomic():
            out = locks.job_output(job, stream)
            if out.complete:
                continue
            have = len(bytes(out.data))
            room = OUTPUT_CAP - have
            chunk = backend.read_output(job.remote_dir, stream, have, room + 1) if room > 0 else b""
            out.truncated = out.truncated or len(chunk) > room
            out.data = bytes(out.data) + chunk[: max(room, 0)]
            out.complete = final
            out.fetched_at = timezone.now()
            out.save()
            added[stream] = min(len(chunk), max(room, 0))
    if final:
        added["artifacts"] = len(collect_artifacts(job))
    return added


def output_of(job: Job, stream: str, offset: int = 0) -> tuple[bytes, bool, bool]:
    """(bytes from offset, truncated, complete) of what the portal has fetched so far."""
    out = JobOutput.objects.filter(job=job, stream=stream).first()
    if out is None:
        return b"", False, False
    return bytes(out.data)[offset:], out.truncated, out.complete


def collect_artifacts(job: Job) -> list[JobArtifact]:
    """Copy what the finished job left in outputs/ and record it, once.

    The copy (thousands of files, gigabytes) runs outside any transaction: no row lock and no PostgreSQL snapshot
    is held while bytes move, and no connection sits idle in a transaction a site's
    `idle_in_transaction_session_timeout` would cut. Two final fetches may race (the tracker's and a log view's): a
    claim in the cache lets one copy while the other returns at once, and the record is written under the job's
    row lock only if no collection recorded first. A claim that ran out during a very long copy costs a second
    copy to the same keys, never a second record."""
    if not job.remote_dir or job.artifacts.exists():
        return list(job.artifacts.all())
    claim = f"kakehashi:collect-outputs:{job.pk}"
    if not cache.add(claim, 1, timeout=settings.KAKEHASHI_DISPATCH_LEASE_SECONDS * 10):
        return []  # another worker is copying them; it records them
    try:
        copied = _copy(job)
        with transaction.atomic():
            locks.job_row(job.pk)
            if job.artifacts.exists():
                return list(job.artifacts.all())
            # Bookkeeping (no state, no event, no `updated_at`): what the job reported, what did not come back.
            found = {"outputs_not_collected": copied.not_collected}
            if copied.metrics is not None:
                found["metrics"] = copied.metrics
            transitions.update([job], stamp=False, **found)
            return JobArtifact.objects.bulk_create(copied.artifacts)
    finally:
        cache.delete(claim)


@dataclass
class _Copied:
    """What a collection copied, to be recorded in one short transaction."""

    artifacts: list[JobArtifact]
    not_collected: list[str]
    metrics: dict | None = None


def _copy(job: Job) -> _Copied:
    backend = _backend(job)
    budget = settings.KAKEHASHI_OUTPUT_COPY_BYTES
    limit, depth = settings.KAKEHASHI_OUTPUT_MAX_FILES, settings.KAKEHASHI_OUTPUT_MAX_DEPTH
    listing = backend.list_outputs(job.remote_dir, limit=limit, depth=depth)
    skipped: Counter[str] = Counter("symbolic links or other files that are not regular files"
                                    for _ in listing.not_files)
    artifacts = []
    metrics = None
    for remote in listing.files:
        problem = key_problem(job.uuid, remote.path)
        if problem:
            skipped[problem] += 1
            continue
        stored_name = ""
        if remote.path == METRICS_FILE:  # the documented way a job reports numbers (portal/jobs/metrics.py)
            metrics = parse_metrics(backend.read_file(job.remote_dir, f"{OUTPUTS_DIR}/{remote.path}",
                                                      limit=remote.size + 1))
        if objectstore.configured():
            # All of it, streamed: the object store holds outputs of any size, downloaded by presigned GETs.
            stored_name = stream_job_output(job.uuid, remote.path,
                                            backend.stream_file(job.remote_dir, f"{OUTPUTS_DIR}/{remote.path}"),
                                            remote.size)
        elif remote.size <= budget:
            data = backend.read_file(job.remote_dir, f"{OUTPUTS_DIR}/{remote.path}", limit=remote.size + 1)
            if len(data) == remote.size:
                stored_name = save_job_output(job.uuid, remote.path, data)
                budget -= remote.size
        artifacts.append(JobArtifact(job=job, path=remote.path, size=remote.size, stored_name=stored_name))
    return _Copied(artifacts, _not_collected(skipped, listing, limit, depth), metrics)


def record_health_check(job_id: int) -> dict | None:
    """Fetch a finished health-check job's result from the cluster and store it with the hardware (worker side)."""
    job = Job.objects.select_related("cluster", "hardware", "project", "user").get(pk=job_id)
    if job.state != JobState.COMPLETED or job.hardware is None:
        return None
    raw = _backend(job).read_file(job.remote_dir, HEALTH_FILE, limit=256 * 1024)
    if not raw:
        return None
    measured = {**parse_health(raw), "job": job.pk, "nodes": job.nodes}
    record_measurement(job.hardware, measured, project=job.project, job_id=job.pk)
    return measured
