"""Idle GPUs end to end on real schedulers: a 2-node job on Slurm and on the TSUBAME-style Grid Engine samples
every node (through the test cluster's nvidia-smi stand-in, which answers from files this test writes; the CPU and
memory are the job's real processes), the tracking cycle brings the samples home, the rule sees the job busy, then
idle, warns its owner twice, the owner keeps it, the warnings come again after the keep, and the rule cancels it;
accounting settles it like any cancelled job and its samples stay.

The rule is the project's, in seconds (the site's minimum window is lowered for the test): a sample a second, idle
after 4 s, warnings at 4 and 6 s, the cancel at 8 s. The tracker and the sample reader are called as the beat calls
them; the cancel task runs in this process (Celery eager).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pytest

from backends.script import SAMPLER_FILE
from portal.catalog.models import HardwareType
from portal.jobs.actions.submit import submit_job
from portal.jobs.actions.validation import JobRequest
from portal.jobs.causes import Cause
from portal.jobs.models import Job, JobEvent, JobState
from portal.jobs.tracking import track_cluster
from portal.notifications.models import Kind, Notification
from portal.samples.actions import keep
from portal.samples.fetch import watch_cluster
from portal.samples.models import IdleRule, JobSamples
from tests.cli.conftest import cli_home, kakehashi_script, kh  # noqa: F401 - the CLI tests' fixtures, here too
from tests.conftest import wait_for
from tests.processes import running

pytestmark = [pytest.mark.cluster, pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("no_live_worker")]

STANDIN = Path(__file__).parents[1] / "cluster" / "nvidia-smi-standin"
FIXTURES = Path(__file__).parents[1] / "backends" / "fixtures" / "nvidia_smi"
# cluster, 2-node hardware, the nodes' names as the sampler sees them
# (On Slurm, one GPU per node: whole 8-GPU nodes wait behind the other tests sharing the test cluster.)
PLACES = {
    "slurm": ("slurm-test", "slurm-a100x1-2-nodes", ("node01", "node02")),
    "tsubame": ("sge-tsubame-test", "tsubame-f-node", ("sgenode01", "sgenode02")),
}


@pytest.fixture
def gpus():
    """The stand-in in a directory every test-cluster user can read; the test writes what the GPUs say."""
    directory = Path(tempfile.mkdtemp(prefix="kh-gpus-"))
    directory.chmod(0o755)
    shutil.copy(STANDIN, directory / "nvidia-smi")
    (directory / "nvidia-smi").chmod(0o755)
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def say(directory: Path, name: str, fixture: str) -> None:
    """What nvidia-smi answers on a node (`<node>.csv`) or every node (`gpus.csv`), atomically."""
    tmp = directory / f".{name}.tmp"
    tmp.write_text((FIXTURES / fixture).read_text())
    tmp.chmod(0o644)
    tmp.rename(directory / name)


@pytest.mark.parametrize("place", sorted(PLACES))
def test_an_idle_two_node_job_is_sampled_on_every_node_warned_kept_and_cancelled(hpc_site, eager, settings, gpus,
                                                                                  place, kh, live_server):  # noqa: F811
    cluster_slug, hardware_slug, nodes = PLACES[place]
    settings.KAKEHASHI_IDLE_MIN_WINDOW_SECONDS = 1
    cluster = hpc_site.clusters[cluster_slug]
    HardwareType.objects.get_or_create(slug="slurm-a100x1-2-nodes", defaults={
        "cluster": hpc_site.clusters["slurm-test"], "name": "A100 slices", "gpu_model": "a100", "gpus_per_node": 1,
        "cpus_per_node": 1, "max_nodes": 2, "scheduler_mapping": {"partition": "gpu", "gres": "gpu:a100:1"},
        "rate": "0.5"})
    cluster.options = {**cluster.options, "sample_seconds": 1, "nvidia_smi": str(gpus / "nvidia-smi")}
    cluster.save()
    IdleRule.objects.create(project=hpc_site.project, threshold_percent=5, window_seconds=4, warn_at_seconds=[4, 6],
                            action="cancel", cancel_after_seconds=8, keep_max_hours=1)
    say(gpus, "gpus.csv", "h100-2x-idle.csv")  # every node idle...
    say(gpus, f"{nodes[1]}.csv", "a100-8x-training.csv")  # ...but the second one trains
    job = submit_job(hpc_site.alice, JobRequest(project=hpc_site.project, name="idle-2-nodes", script="sleep 300",
                                                hardware=HardwareType.objects.get(slug=hardware_slug), nodes=2,
                                                walltime="00:10:00")).job

    def cycle(predicate, message: str, timeout: float = 60):
        def ready():
            track_cluster(cluster.pk)
            watch_cluster(cluster.pk)
            return predicate()
        try:
            return wait_for(ready, timeout=timeout, interval=0.5, message=message)
        except AssertionError as exc:
            s = samples()
            raise AssertionError(f"{exc}; the rule said {s and s.state}: {s and s.state_why}") from None

    def samples() -> JobSamples | None:
        return JobSamples.objects.filter(job=job).first()

    # Busy: samples from both nodes, one of which trains.
    cycle(lambda: (s := samples()) is not None and s.state == "busy", "the job seen busy", timeout=90)
    s = samples()
    assert set(s.series["nodes"]) == set(nodes)
    assert {f"{nodes[0]}/0", f"{nodes[0]}/1"} <= set(s.series["gpus"]) and f"{nodes[1]}/7" in s.series["gpus"]
    assert s.series["gpus"][f"{nodes[1]}/7"]["p"][-1][2] == 99 and s.series["gpus"][f"{nodes[0]}/0"]["p"][-1][2] == 0
    assert all(p[2] is not None for c in s.series["cpu"].values() for p in c["p"][1:])  # real CPU readings
    assert s.summary["gpu_hours_used"] > 0

    # Idle: the second node stops training; both warnings, each an event with the samples and a notice.
    say(gpus, f"{nodes[1]}.csv", "a100-8x-idle.csv")
    cycle(lambda: JobEvent.objects.filter(job=job, cause=Cause.IDLE_WARNED).count() == 2, "two warnings")
    assert samples().state == "idle" and Job.objects.get(pk=job.pk).state == JobState.RUNNING
    warning = JobEvent.objects.filter(job=job, cause=Cause.IDLE_WARNED).order_by("pk").first()
    evidence = warning.data["samples"]
    assert {device.split("/")[0] for device, _, _ in evidence} == set(nodes) and all(u < 5 for _, _, u in evidence)
    assert Notification.objects.filter(user=hpc_site.alice, job=job, kind=Kind.IDLE).count() == 2
    # The API's job list and the CLI's table say it too.
    from portal.api.tokens import issue_token

    env = {"KAKEHASHI_URL": live_server.url,
           "KAKEHASHI_TOKEN": issue_token(hpc_site.alice, name="cli", scopes=["read"])[1]}
    listed = kh("status", "--json", env=env)
    assert listed.code == 0, listed.err
    mine = next(j for j in json.loads(listed.out) if j["id"] == job.pk)
    assert mine["gpu_state"] == "idle" and mine["gpu_hours_idle"] > 0 and mine["gpu_efficiency"] > 0
    row = next(line for line in kh("status", env=env).out.splitlines() if line.startswith(f"{job.pk} "))
    assert " idle " in row

    # The owner keeps it for 10 seconds: no cancel meanwhile; then the warnings again, then the cancel.
    kept = keep(Job.objects.get(pk=job.pk), hpc_site.alice, 10 / 3600)
    assert kept.keeps == 1 and JobEvent.objects.filter(job=job, cause=Cause.IDLE_KEPT).exists()
    cycle(lambda: JobEvent.objects.filter(job=job, cause=Cause.IDLE_WARNED).count() == 4, "the warnings again")
    first_after_keep = JobEvent.objects.filter(job=job, cause=Cause.IDLE_WARNED).order_by("pk")[2]
    assert first_after_keep.at >= kept.keep_until
    ended = cycle(lambda: Job.objects.get(pk=job.pk).is_final, "the idle cancel", timeout=90)
    job = Job.objects.get(pk=job.pk)
    assert job.state == JobState.CANCELLED and job.cancel_cause == Cause.CANCELLED_IDLE
    assert JobEvent.objects.filter(job=job, cause=Cause.CANCELLED_IDLE).exists()
    assert job.cost_amount is not None  # settled from accounting like any cancel
    assert ended and Notification.objects.filter(user=hpc_site.alice, job=job, kind=Kind.IDLE).count() == 5
    # Nothing lost: the last samples are read once more, and kept.
    cycle(lambda: samples().complete, "the last samples read")
    assert samples().summary["gpu_hours_idle"] > 0
    # And nothing left running: no node's sampler outlives the cancelled job (on Grid Engine, qdel kills Open MPI's
    # daemon on the second node but not the sampler rank it started, which then stops on its own).
    assert job.remote_dir
    sampler = f"{job.remote_dir}/{SAMPLER_FILE}"
    cycle(lambda: not running(sampler), "every node's sampler stopped",
          timeout=15)
