"""The job templates that ship run for real: DDP training whose loss falls on one node and across two nodes of
Slurm, the TSUBAME-style Grid Engine and the PBS/Torque dialect (torchrun and mpirun, the ranks of each node
counted from the job's own output), a health check that is stored."""

from __future__ import annotations

import re
from collections import defaultdict

import pytest

from portal.catalog.models import HardwareType, Software
from portal.jobs.actions.submit import submit_job
from portal.jobs.actions.validation import JobRequest
from portal.jobs.models import Job, JobState
from tests.conftest import QUEUE_WAIT, ended_job, job_output, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def _stdout(job: Job) -> str:
    return job_output(job, "stdout")


def _story(job: Job) -> str:
    """What a researcher would read on the job page when it fails: both streams and the reason."""
    return f"{_stdout(job)}\n--- stderr ---\n{job_output(job, 'stderr')}\n--- reason ---\n{job.state_reason}"


def _losses(text: str) -> list[float]:
    return [float(x) for x in re.findall(r"epoch \d+/\d+ loss ([0-9.]+)", text)]


# Every process of the DDP template says who it is (job_templates/common/kakehashi_dist.py).
_RANK_LINE = re.compile(r"^rank (\d+) of (\d+) \(local rank (\d+)\) on (\S+)$", re.MULTILINE)


def _ranks_per_node(text: str) -> dict[str, list[int]]:
    """From the job's own output: node -> the local ranks that ran there, once it is checked that the reports
    form one world in which every rank ran exactly once."""
    rows = _RANK_LINE.findall(text)
    worlds = {int(world) for _, world, _, _ in rows}
    assert len(worlds) == 1, f"processes disagree on the world size: {sorted(worlds)}"
    assert sorted(int(rank) for rank, _, _, _ in rows) == list(range(worlds.pop())), text
    per_node: dict[str, list[int]] = defaultdict(list)
    for _, _, local, node in rows:
        per_node[node].append(int(local))
    return {node: sorted(local_ranks) for node, local_ranks in per_node.items()}


def _submit(site, **fields) -> Job:
    req = JobRequest(project=site.project, software=Software.objects.get(slug="pytorch-2-13"), **fields)
    return submit_job(site.alice, req).job


def test_ddp_training_on_one_node_with_two_processes_through_torchrun_loss_falls(hpc_site, live_worker):
    job = _submit(hpc_site, name="ddp-one-node", template="ddp-mnist", script="", walltime="00:10:00",
                  hardware=HardwareType.objects.get(slug="slurm-a100x8"), procs_per_node=2)
    assert 'torchrun --nnodes=1 --nproc-per-node=2 --standalone --no-python bash "$KAKEHASHI_JOB_DIR/payload.sh"' in job.rendered_script
    job = wait_for(lambda: ended_job(job.pk), timeout=QUEUE_WAIT + 180, message="DDP training")
    text = _stdout(job)
    assert job.state == JobState.COMPLETED, _story(job)
    assert "world size 2 (cpu, gloo)" in text
    losses = _losses(text)
    assert len(losses) == 3 and losses[-1] < losses[0] * 0.5


def _train_on_two_nodes(site, hardware: str, **fields) -> tuple[Job, str]:
    """The DDP template on two nodes, a few quick steps; the finished job and its stdout."""
    job = _submit(site, name=f"ddp-{hardware}", template="ddp-mnist", script="", walltime="00:10:00", nodes=2,
                  hardware=HardwareType.objects.get(slug=hardware), env={"EPOCHS": "2", "SAMPLES": "1024"}, **fields)
    job = wait_for(lambda: ended_job(job.pk), timeout=QUEUE_WAIT + 240,
                   message=f"two-node DDP training on {hardware}")
    assert job.state == JobState.COMPLETED, _story(job)
    text = _stdout(job)
    losses = _losses(text)
    assert len(losses) == 2 and losses[-1] < losses[0], text
    return job, text


@pytest.mark.long
def test_ddp_on_two_slurm_nodes_starts_one_torchrun_per_node_with_a_process_per_gpu(hpc_site, live_worker):
    """2 nodes x 8 GPUs with the default processes per node: 2 torchruns of 8 processes, not 16 torchruns."""
    job, text = _train_on_two_nodes(hpc_site, "slurm-a100x8")
    assert "#SBATCH --ntasks-per-node=1" in job.rendered_script
    assert "srun --nodes=2 --ntasks=2 --ntasks-per-node=1 --kill-on-bad-exit=1 torchrun --nnodes=2 --nproc-per-node=8" \
        in job.rendered_script
    assert "hosts:   node01 node02" in text and "world size 16 (cpu, gloo)" in text
    assert _ranks_per_node(text) == {"node01": list(range(8)), "node02": list(range(8))}


def test_ddp_on_two_tsubame_f_nodes_starts_one_torchrun_per_node_through_mpirun(hpc_site, live_worker):
    """TSUBAME's -l f_node=2 gives the job two hosts; mpirun starts a torchrun on each (qrsh -inherit)."""
    job, text = _train_on_two_nodes(hpc_site, "tsubame-f-node", procs_per_node=2)
    assert job.submit_command == "qsub -g kkdemo -terse -w e job.sh" and "#$ -l f_node=2" in job.rendered_script
    assert 'mpirun -npernode 1 -n 2 -hostfile "$KAKEHASHI_JOB_DIR/hosts.txt"' in job.rendered_script
    assert "world size 4 (cpu, gloo)" in text
    hosts = re.search(r"^hosts:   (.*)$", text, re.MULTILINE).group(1).split()
    assert sorted(hosts) == ["sgenode01", "sgenode02"]
    assert _ranks_per_node(text) == {"sgenode01": [0, 1], "sgenode02": [0, 1]}


def test_ddp_on_two_pbs_nodes_starts_one_torchrun_per_node_through_mpirun(hpc_site, live_worker):
    job, text = _train_on_two_nodes(hpc_site, "pbs-cpu", procs_per_node=2)
    assert "#PBS -l nodes=2:ppn=2" in job.rendered_script
    assert 'mpirun -npernode 1 -n 2 -hostfile "$KAKEHASHI_JOB_DIR/hosts.txt"' in job.rendered_script
    assert "hosts:   node01 node02" in text and "world size 4 (cpu, gloo)" in text
    assert _ranks_per_node(text) == {"node01": [0, 1], "node02": [0, 1]}


@pytest.mark.parametrize(("hardware", "nodes"), [("slurm-a100x8", ["node01", "node02"]),
                                                 ("tsubame-f-node", ["sgenode01", "sgenode02"]),
                                                 ("pbs-cpu", ["node01", "node02"])],
                         ids=["slurm", "tsubame", "pbs"])
def test_mpirun_starts_the_processes_per_node_on_each_of_two_nodes(hpc_site, live_worker, hardware, nodes):
    job, text = _train_on_two_nodes(hpc_site, hardware, launcher="mpirun", procs_per_node=2)
    assert 'mpirun -npernode 2 -n 4 -hostfile "$KAKEHASHI_JOB_DIR/hosts.txt"' in job.rendered_script
    assert "world size 4 (cpu, gloo)" in text
    assert _ranks_per_node(text) == dict.fromkeys(nodes, [0, 1])


def test_the_health_check_is_measured_and_stored_with_the_hardware(hpc_site, live_worker):
    hardware = HardwareType.objects.get(slug="slurm-a100x8")
    assert hardware.measured == {}
    job = _submit(hpc_site, name="health", template="gpu-health", script="", walltime="00:10:00", hardware=hardware,
                  procs_per_node=2)
    job = wait_for(lambda: ended_job(job.pk), timeout=QUEUE_WAIT + 180, message="the health check")
    assert job.state == JobState.COMPLETED, _story(job)
    hardware = wait_for(lambda: HardwareType.objects.filter(pk=hardware.pk, measured__has_key="tflops").first(),
                        message="the measurement to be stored")
    assert hardware.measured["mode"] == "cpu" and hardware.measured["world_size"] == 2
    assert hardware.measured["tflops"] > 0 and hardware.measured["busbw_gbps"] > 0
    assert hardware.measured["job"] == job.pk
    assert hardware.speed_per_rate > 0
    assert "all-reduce bus bandwidth" in _stdout(job)


@pytest.mark.parametrize("hardware", ["slurm-a100x8", "tsubame-f-node", "pbs-cpu"], ids=["slurm", "tsubame", "pbs"])
def test_a_payload_that_fails_under_mpirun_on_two_nodes_ends_the_job_failed_with_its_exit_code(hpc_site, live_worker,
                                                                                               hardware):
    """Every rank exits 3 on both nodes: the job ends FAILED with exit code 3, not COMPLETED from the record of a
    node's own task that ended well (Grid Engine writes one accounting record per node's task, the job's last)."""
    job = _submit(hpc_site, name="mpi-exit-3", script='echo "rank on $(hostname)"; exit 3', walltime="00:10:00",
                  nodes=2, hardware=HardwareType.objects.get(slug=hardware), launcher="mpirun", procs_per_node=2)
    assert 'mpirun -npernode 2 -n 4 -hostfile "$KAKEHASHI_JOB_DIR/hosts.txt"' in job.rendered_script
    job = wait_for(lambda: ended_job(job.pk), timeout=QUEUE_WAIT + 180,
                   message=f"the failing mpirun job on {hardware}")
    assert (job.state, job.exit_code) == (JobState.FAILED, 3), _story(job)
