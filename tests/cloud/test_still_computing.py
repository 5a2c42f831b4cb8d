"""The reconciler's "still computing?" answered with the samples: /site/'s table of what runs in the cloud says, for
each portal job, what its GPUs do (docs/guide/cloud.md, docs/guide/idle-gpus.md).

End to end: two portal jobs dispatched to the AWS Batch cluster (moto), held RUNNING there, their real container
commands run as processes on this host (no container runtime here), each with its own nvidia-smi stand-in on its
PATH as each container has its own GPUs: one answers idle A100s, the other A100s that train. The entrypoint pushes
the sampler's files to the S3 server (SeaweedFS) every second; the tracking cycle and the sample reader run as the
beat runs them; the project's idle rule is in seconds (the site's minimum window lowered for the test).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from portal.cloud import reconciler as cloud
from portal.clusters.connect import backend_for
from portal.jobs.models import Job, JobState
from portal.jobs.tracking import track_cluster
from portal.samples.fetch import watch_cluster
from portal.samples.models import IdleRule, JobSamples
from tests.cloud.test_cloud_jobs import submitted
from tests.conftest import wait_for
from tests.processes import descendants
from tests.processes import running as running_here

pytestmark = pytest.mark.django_db
STANDIN = Path(__file__).parents[1] / "cluster" / "nvidia-smi-standin"
FIXTURES = Path(__file__).parents[1] / "backends" / "fixtures" / "nvidia_smi"


def container(backend, job: Job, store, workdir: Path, gpus: str) -> subprocess.Popen:
    """The job's container command as Batch runs it (its definition's environment, Batch's own variables), on a
    "host" whose nvidia-smi answers `gpus` (a fixture): a directory of its own first on the PATH. end_container ends
    it whole (entrypoint, job script, payload and sampler)."""
    described = backend.aws.batch.describe_jobs(jobs=[job.scheduler_id])["jobs"][0]["container"]
    tools = workdir / "bin"
    tools.mkdir(parents=True)
    shutil.copy(STANDIN, tools / "nvidia-smi")
    shutil.copy(FIXTURES / gpus, tools / "gpus.csv")
    env = {"PATH": f"{tools}:{os.environ['PATH']}", "HOME": str(workdir), "AWS_REGION": backend.settings["region"],
           "AWS_ACCESS_KEY_ID": store.access_key, "AWS_SECRET_ACCESS_KEY": store.secret_key,
           "AWS_BATCH_JOB_ID": job.scheduler_id, "AWS_BATCH_JOB_ATTEMPT": "1",
           "KAKEHASHI_WORK_DIR": str(workdir / "c"), "KAKEHASHI_SAMPLE_PUSH_SECONDS": "1",
           **{e["name"]: e["value"] for e in described["environment"] if not e["name"].startswith("AWS_BATCH")}}
    return subprocess.Popen([sys.executable, "-c", described["command"][2]], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True)


def end_container(process: subprocess.Popen) -> None:
    """Stop a container as Batch does, every process in it: the entrypoint starts the job script in a session of its
    own (so that it can signal the job's processes whole), which a signal to the entrypoint's group alone misses.
    Each process is stopped first, until none is found that is not, so that none forks a child after the list was
    read; then all are killed."""
    tree: set[int] = set()
    while (found := {process.pid, *descendants(process.pid)}) - tree:
        for pid in found - tree:
            _signal(pid, signal.SIGSTOP)
        tree |= found
    for pid in tree:
        _signal(pid, signal.SIGKILL)
    process.wait(timeout=10)


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def row_of(page: str, job: Job) -> str:
    """The text of the cloud table's row of a job, tags stripped."""
    match = re.search(rf'<tr data-cloud-job="{re.escape(job.scheduler_id)}">(.*?)</tr>', page, re.S)
    assert match, f"no row for job {job.pk} on /site/"
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", match.group(1)))


def test_the_site_page_says_which_cloud_job_still_computes_and_which_has_been_idle_since_when(
        aws_site, moto_aws, admin_client, settings, tmp_path):
    settings.KAKEHASHI_IDLE_MIN_WINDOW_SECONDS = 1
    aws = aws_site.aws
    aws.options = {**aws.options, "sample_seconds": 1}
    aws.save()
    IdleRule.objects.create(project=aws_site.project, threshold_percent=5, window_seconds=2, warn_at_seconds=[],
                            action="tell", keep_max_hours=1)
    idle = submitted(aws_site, name="forgot-to-stop", script="sleep 120\n", walltime="01:00:00")
    busy = submitted(aws_site, name="trains", script="sleep 120\n", walltime="01:00:00")
    backend = backend_for(aws)
    for job in (idle, busy):
        moto_aws.hold(job.scheduler_id, "RUNNING", started=timezone.now())
    running = [container(backend, idle, aws_site.store, tmp_path / "idle", "a100-8x-idle.csv"),
               container(backend, busy, aws_site.store, tmp_path / "busy", "a100-8x-training.csv")]
    try:
        def judged():
            track_cluster(aws.pk)
            watch_cluster(aws.pk)
            states = dict(JobSamples.objects.filter(job__in=[idle, busy]).values_list("job_id", "state"))
            return states == {idle.pk: "idle", busy.pk: "busy"}

        try:
            wait_for(judged, timeout=60, interval=0.5, message="one job judged idle and the other busy")
        except AssertionError as exc:
            found = list(JobSamples.objects.values_list("job_id", "state", "state_why"))
            errors = [p.stderr.read1().decode()[-2000:] if p.poll() is not None else "" for p in running]
            raise AssertionError(f"{exc}: {found} {errors}") from None
        assert all(p.poll() is None for p in running)  # judged while the containers still run
    finally:
        for process in running:
            end_container(process)
    assert running_here(str(tmp_path)) == []  # nothing of either container is left (its sampler pushing on)
    assert Job.objects.get(pk=idle.pk).state == JobState.RUNNING

    report = cloud.reconcile(aws)
    assert report.stopped == [] and {s.job_id for s in report.running} == {idle.pk, busy.pk}
    with CaptureQueriesContext(connection) as statements:
        seen = cloud.cloud_now()
    assert len(statements) == 2  # the clusters, and the samples of every row at once
    answers = {s["job_id"]: s["computing"] for c in seen for s in c["seen"]["running"]}
    assert (answers[idle.pk]["state"], answers[busy.pk]["state"]) == ("idle", "busy")

    page = admin_client.get(reverse("site-admin")).content.decode()
    assert "Still computing?" in page
    since = timezone.localtime(JobSamples.objects.get(job=idle).idle_since).strftime("%H:%M")
    assert f"idle since {since} (every GPU below 5 %)" in row_of(page, idle)
    computing = row_of(page, busy)
    assert re.search(r"computing: GPUs 9\d % used \(8 of 8 GPUs busy\)", computing), computing
    assert "samples read" in computing
