"""The job templates that ship run for real: DDP training whose loss falls, a health check that is stored."""

from __future__ import annotations

import re

import pytest

from portal.catalog.models import HardwareType, Software
from portal.jobs import actions
from portal.jobs.models import Job, JobOutput, JobState
from tests.conftest import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def _finished(job_id: int) -> Job | None:
    job = Job.objects.get(pk=job_id)
    return job if job.is_final else None


def _stream(job: Job, stream: str) -> str:
    out = wait_for(lambda: JobOutput.objects.filter(job=job, stream=stream, complete=True).first(), message=stream)
    return bytes(out.data).decode()


def _stdout(job: Job) -> str:
    return _stream(job, "stdout")


def _story(job: Job) -> str:
    """What a researcher would read on the job page when it fails: both streams and the reason."""
    return f"{_stdout(job)}\n--- stderr ---\n{_stream(job, 'stderr')}\n--- reason ---\n{job.state_reason}"


def _losses(text: str) -> list[float]:
    return [float(x) for x in re.findall(r"epoch \d+/\d+ loss ([0-9.]+)", text)]


def _submit(site, **fields) -> Job:
    req = actions.JobRequest(project=site.project, software=Software.objects.get(slug="pytorch-2-13"), **fields)
    return actions.submit_job(site.alice, req).job


def test_ddp_training_on_one_node_with_two_processes_through_torchrun_loss_falls(hpc_site, live_worker):
    job = _submit(hpc_site, name="ddp-one-node", template="ddp-mnist", script="", walltime="00:10:00",
                  hardware=HardwareType.objects.get(slug="slurm-a100x8"), procs_per_node=2)
    assert 'torchrun --nnodes=1 --nproc-per-node=2 --standalone --no-python bash "$KAKEHASHI_JOB_DIR/payload.sh"' in job.rendered_script
    job = wait_for(lambda: _finished(job.pk), timeout=180, message="DDP training")
    text = _stdout(job)
    assert job.state == JobState.COMPLETED, _story(job)
    assert "world size 2 (cpu, gloo)" in text
    losses = _losses(text)
    assert len(losses) == 3 and losses[-1] < losses[0] * 0.5


def test_ddp_training_across_two_nodes_rendezvous_on_the_first_host(hpc_site, live_worker):
    job = _submit(hpc_site, name="ddp-two-nodes", template="ddp-mnist", script="", walltime="00:10:00", nodes=2,
                  hardware=HardwareType.objects.get(slug="slurm-a100x8"), procs_per_node=1, env={"EPOCHS": "2"})
    assert "srun --nodes=2 --ntasks-per-node=1" in job.rendered_script
    assert '--rdzv-endpoint="$MASTER_ADDR:$MASTER_PORT"' in job.rendered_script
    job = wait_for(lambda: _finished(job.pk), timeout=180, message="two-node DDP training")
    text = _stdout(job)
    assert job.state == JobState.COMPLETED, _story(job)
    assert "hosts:   node01 node02" in text and "world size 2 (cpu, gloo)" in text
    losses = _losses(text)
    assert len(losses) == 2 and losses[-1] < losses[0]


def test_the_health_check_is_measured_and_stored_with_the_hardware(hpc_site, live_worker):
    hardware = HardwareType.objects.get(slug="slurm-a100x8")
    assert hardware.measured == {}
    job = _submit(hpc_site, name="health", template="gpu-health", script="", walltime="00:10:00", hardware=hardware,
                  procs_per_node=2)
    job = wait_for(lambda: _finished(job.pk), timeout=180, message="the health check")
    assert job.state == JobState.COMPLETED, _story(job)
    hardware = wait_for(lambda: HardwareType.objects.filter(pk=hardware.pk, measured__has_key="tflops").first(),
                        message="the measurement to be stored")
    assert hardware.measured["mode"] == "cpu" and hardware.measured["world_size"] == 2
    assert hardware.measured["tflops"] > 0 and hardware.measured["busbw_gbps"] > 0
    assert hardware.measured["job"] == job.pk
    assert hardware.speed_per_rate > 0
    assert "all-reduce bus bandwidth" in _stdout(job)
