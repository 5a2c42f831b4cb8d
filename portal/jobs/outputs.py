"""Bringing a job's output home (worker side): stdout/stderr as it grows, and at the end what it left in outputs/.

Names come from the cluster, so they are untrusted: only plain relative paths are kept. Files are copied up to
a per-job budget (KAKEHASHI_OUTPUT_COPY_BYTES); larger ones are listed and stay on the cluster.
"""

from __future__ import annotations

import re

from django.conf import settings
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.db import transaction
from django.utils import timezone

from backends.base import OUTPUTS_DIR
from portal.clusters.connect import account_for, backend_for
from portal.jobs.models import FINAL_STATES, Job, JobArtifact, JobOutput

_SAFE_PATH = re.compile(r"[A-Za-z0-9_.+=,@-]+(/[A-Za-z0-9_.+=,@-]+)*")
MAX_FILES = 200


def _safe(path: str) -> bool:
    return bool(_SAFE_PATH.fullmatch(path)) and not any(part in {".", ".."} for part in path.split("/"))


def collect_artifacts(job: Job) -> list[JobArtifact]:
    # Two final fetches may race (the tracker's and a log view's): the job row lock lets one collect.
    with transaction.atomic():
        Job.objects.select_for_update().filter(pk=job.pk).first()
        if job.artifacts.exists() or not job.remote_dir:
            return list(job.artifacts.all())
        return _collect(job)


def _collect(job: Job) -> list[JobArtifact]:
    backend = backend_for(job.cluster, account_for(job.cluster, job.user, job.project))
    outputs = f"{job.remote_dir.rstrip('/')}/{OUTPUTS_DIR}"
    import shlex

    listing = backend.transport.run_shell(
        f"find {shlex.quote(outputs)} -maxdepth 4 -type f -printf '%s\\t%P\\n' 2>/dev/null | head -n {MAX_FILES}"
    )
    budget = settings.KAKEHASHI_OUTPUT_COPY_BYTES
    artifacts = []
    for line in listing.stdout.splitlines():
        size_text, _, path = line.partition("\t")
        if not size_text.isdigit() or not _safe(path):
            continue
        size = int(size_text)
        stored_name = ""
        if size <= budget:
            data = backend.transport.read_file(f"{outputs}/{path}", limit=size + 1)
            if len(data) == size:
                stored_name = default_storage.save(f"jobs/{job.uuid}/outputs/{path}", ContentFile(data))
                budget -= size
        artifacts.append(JobArtifact.objects.create(job=job, path=path, size=size, stored_name=stored_name))
    return artifacts


OUTPUT_CAP = 8 * 1024 * 1024  # bytes of each stream kept in the portal; the rest stays on the cluster


def fetch_output(job_id: int) -> dict[str, int]:
    """Copy new stdout/stderr bytes from the cluster into JobOutput (worker side). Returns bytes added.

    The JobOutput rows are locked while a fetch reads and appends, so a refresh that races with the final fetch
    can neither append the same bytes twice nor mark a complete output incomplete again.
    """
    job = Job.objects.select_related("cluster", "project", "user").get(pk=job_id)
    if not job.remote_dir or not job.scheduler_id:
        return {}
    final = job.state in FINAL_STATES
    account = account_for(job.cluster, job.user, job.project)
    backend = backend_for(job.cluster, account)
    added = {}
    for stream in ("stdout", "stderr"):
        JobOutput.objects.get_or_create(job=job, stream=stream)
        with transaction.atomic():
            out = JobOutput.objects.select_for_update().get(job=job, stream=stream)
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
