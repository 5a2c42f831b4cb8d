"""Slurm specifics: directives from a job description, sacct parsing, and the job-completion log."""

from __future__ import annotations

import pytest

from backends.base import ArrayElement, InvalidJobSpec, JobSpec, Launcher, Resources, State
from backends.slurm import SACCT_FIELDS, SlurmBackend, parse_sacct, parse_scontrol_exit_codes, slurm_walltime
from tests.backends.conftest import wait_state


def _spec(**overrides) -> JobSpec:
    fields = dict(
        name="kh-0123456789-train", payload="python train.py", walltime_seconds=2 * 86400 + 3661,
        resources=Resources(nodes=2, gpus_per_node=8, gpu_type="a100", cpus_per_node=64, memory_gb=500,
                            mapping={"partition": "gpu", "qos": "high"}),
        workdir="kakehashi-jobs/kh-0123456789-train", group="kkdemo", launcher=Launcher.TORCHRUN,
    )
    return JobSpec(**{**fields, **overrides})


def test_directives_follow_the_hardware_and_the_project():
    assert SlurmBackend(None).directives(_spec()) == [
        "#SBATCH --job-name=kh-0123456789-train",
        "#SBATCH --output=stdout.log",
        "#SBATCH --error=stderr.log",
        "#SBATCH --time=2-01:01:01",
        "#SBATCH --nodes=2",
        # One torchrun agent per node holds the node's CPUs and starts the 8 processes itself.
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --cpus-per-task=64",
        "#SBATCH --partition=gpu",
        "#SBATCH --account=kkdemo",
        "#SBATCH --qos=high",
        "#SBATCH --gres=gpu:a100:8",
        "#SBATCH --mem=500G",
    ]


def test_an_admin_gres_mapping_wins_and_arrays_are_rendered():
    spec = _spec(resources=Resources(gpus_per_node=4, mapping={"gres": "gpu:h100:4"}),
                 array=tuple(ArrayElement(i) for i in range(1, 11)))
    lines = SlurmBackend(None).directives(spec)
    assert "#SBATCH --gres=gpu:h100:4" in lines and "#SBATCH --array=1-10" in lines
    # Each element writes its logs into its own directory, which staging created.
    assert "#SBATCH --output=%a/stdout.log" in lines and "#SBATCH --error=%a/stderr.log" in lines


def test_an_array_element_enters_its_own_directory_and_takes_its_own_parameters():
    spec = _spec(array=(ArrayElement(1, env={"LR": "0.1"}), ArrayElement(2, env={"LR": "$(reboot)"})))
    script = SlurmBackend(None).render(spec)
    assert 'export KAKEHASHI_ARRAY_INDEX="${SLURM_ARRAY_TASK_ID:-}"' in script
    assert 'cd -- "$KAKEHASHI_ARRAY_INDEX"' in script
    # Parameter values are quoted like any other environment value: the preview shows each element's.
    assert "  1) export LR=0.1 ;;" in script and "  2) export LR='$(reboot)' ;;" in script
    with pytest.raises(InvalidJobSpec, match="numbered 1..N"):
        SlurmBackend(None).render(_spec(array=(ArrayElement(2),)))
    with pytest.raises(InvalidJobSpec, match="not allowed"):
        SlurmBackend(None).render(_spec(array=(ArrayElement(1, env={"A B": "x"}),)))


@pytest.mark.parametrize(("launcher", "procs_per_node", "tasks", "cpus"), [
    (Launcher.TORCHRUN, 0, 1, 64), (Launcher.TORCHRUN, 2, 1, 64),
    (Launcher.MPIRUN, 0, 8, 8), (Launcher.MPIRUN, 4, 4, 16), (Launcher.SCRIPT, 0, 8, 8), (Launcher.SCRIPT, 1, 1, 64),
])
def test_the_allocation_holds_one_task_per_torchrun_agent_or_per_process(launcher, procs_per_node, tasks, cpus):
    lines = SlurmBackend(None).directives(_spec(launcher=launcher, procs_per_node=procs_per_node))
    assert f"#SBATCH --ntasks-per-node={tasks}" in lines and f"#SBATCH --cpus-per-task={cpus}" in lines


def test_multi_node_torchrun_starts_one_agent_per_node_with_srun():
    script = SlurmBackend(None).render(_spec())
    assert ("srun --nodes=2 --ntasks=2 --ntasks-per-node=1 --kill-on-bad-exit=1 torchrun --nnodes=2 --nproc-per-node=8 "
            '--rdzv-backend=c10d --rdzv-endpoint="$MASTER_ADDR:$MASTER_PORT" --rdzv-id="${SLURM_JOB_ID:-kakehashi}" '
            '--no-python bash "$KAKEHASHI_JOB_DIR/payload.sh"') in script
    assert 'scontrol show hostnames "$SLURM_JOB_NODELIST"' in script


@pytest.mark.parametrize(("seconds", "text"), [(59, "00:00:59"), (3600, "01:00:00"), (86400 + 60, "1-00:01:00")])
def test_walltimes_use_slurms_day_format(seconds, text):
    assert slurm_walltime(seconds) == text


def test_sacct_rows_become_records_with_the_right_state_exit_code_and_signal():
    # Recorded from the test cluster's slurmdbd (SLURM_TIME_FORMAT=%s sacct -n -P -o SACCT_FIELDS): allocations
    # and their batch steps. A cancel or a walltime kill leaves "0:0" on the allocation and the signal on the step.
    rows = "\n".join([
        "41|kh-a|COMPLETED|0:0|1795310000|1795310012|12|1|billing=1,cpu=1,gres/gpu=8,mem=1G,node=1|kkdemo|gpu",
        "41.batch|batch|COMPLETED|0:0|1795310000|1795310012|12|1|cpu=1,mem=1G,node=1||",
        "42|kh-b|FAILED|3:0|1795310000|1795310001|1|1|billing=1,cpu=1,mem=1G,node=1|kkdemo|gpu",
        "43|kh-c|CANCELLED by 1001|0:0|1795310000|1795310030|30|1|billing=1,cpu=1,mem=1G,node=1|kkdemo|gpu",
        "43.batch|batch|CANCELLED|0:15|1795310000|1795310030|30|1|cpu=1,mem=1G,node=1||",
        "44|kh-d|TIMEOUT|0:0|1795310000|1795310090|90|1|billing=1,cpu=1,mem=1G,node=1|kkdemo|gpu",
        "44.batch|batch|CANCELLED|0:15|1795310000|1795310090|90|1|cpu=1,mem=1G,node=1||",
        "45|kh-e|RUNNING|0:0|1795310000|Unknown|5|1|billing=1|kkdemo|gpu",
        "46|kh-f|OUT_OF_MEMORY|0:125|1795310000|1795310004|4|1|billing=1|kkdemo|gpu",
        "47|kh-g|FAILED|15:0|1795310000|1795310004|4|1|billing=1|kkdemo|gpu",
    ])
    records = parse_sacct(rows, {"41", "42", "43", "44", "45", "46", "47"})
    assert {k: (r.state, r.exit_code, r.signal) for k, r in records.items()} == {
        "41": (State.COMPLETED, 0, None), "42": (State.FAILED, 3, None), "43": (State.CANCELLED, None, 15),
        "44": (State.TIMED_OUT, None, 15), "46": (State.FAILED, None, 125), "47": (State.FAILED, 15, None),
    }
    assert records["41"].elapsed_seconds == 12 and records["41"].raw["AllocTRES"].endswith("node=1")
    assert records["41"].started_at.timestamp() == 1795310000
    assert len(SACCT_FIELDS.split(",")) == len(rows.splitlines()[0].split("|"))


def test_slurmctlds_exit_code_wins_over_slurmdbds_which_drops_the_top_bit():
    # scontrol -o show job of a script that ran `exit 143` (sacct says 15:0), and of an array element.
    lines = "\n".join([
        "JobId=47 JobName=kh-g UserId=alice(1001) JobState=FAILED Reason=NonZeroExitCode ExitCode=143:0 RunTime=00:00:04",
        "JobId=60 ArrayJobId=58 ArrayTaskId=2 JobName=kh-h JobState=CANCELLED ExitCode=0:15",
    ])
    controller = parse_scontrol_exit_codes(lines)
    assert controller == {"47": (143, 0), "60": (0, 15), "58_2": (0, 15)}
    rows = "\n".join([
        "47|kh-g|FAILED|15:0|1795310000|1795310004|4|1|billing=1|kkdemo|gpu",
        "58_2|kh-h|CANCELLED by 1001|0:0|1795310000|1795310004|4|1|billing=1|kkdemo|gpu",
    ])
    records = parse_sacct(rows, {"47", "58_2"}, controller=controller)
    assert (records["47"].exit_code, records["47"].signal) == (143, None)
    assert (records["58_2"].exit_code, records["58_2"].signal) == (None, 15)


@pytest.mark.cluster
def test_the_job_completion_log_gives_the_final_record_too(transport_for, make_spec):
    """Clusters without slurmdbd: `{"accounting": "jobcomp"}` reads `sacct -c` (the test cluster writes both)."""
    backend = SlurmBackend(transport_for("slurm", "alice"), {"accounting": "jobcomp"})
    ok = backend.submit(make_spec("sleep 1\n", group="kkdemo", mapping={"partition": "gpu"}))
    bad = backend.submit(make_spec("exit 3\n", group="kkdemo", mapping={"partition": "gpu"}))
    records = {job: wait_state(backend, job, lambda r: r.state.is_final) for job in (ok, bad)}
    assert (records[ok].state, records[ok].exit_code) == (State.COMPLETED, 0)
    assert (records[bad].state, records[bad].exit_code) == (State.FAILED, 3)
    assert records[ok].elapsed_seconds is not None and records[ok].elapsed_seconds >= 1


def test_a_container_runs_with_apptainer_and_gpus_and_mpi_codes_with_mpirun_npernode():
    spec = _spec(container="docker://nvcr.io/nvidia/pytorch:24.05-py3", launcher=Launcher.MPIRUN,
                 env={"NCCL_DEBUG": "INFO"})
    script = SlurmBackend(None).render(spec)
    assert ("mpirun -npernode 8 -n 16 -hostfile \"$KAKEHASHI_JOB_DIR/hosts.txt\" -x MASTER_ADDR -x MASTER_PORT -x KAKEHASHI_JOB_DIR "
            "-x KAKEHASHI_OUTPUT_DIR -x NCCL_DEBUG apptainer exec --nv --bind \"$KAKEHASHI_JOB_DIR\" "
            "docker://nvcr.io/nvidia/pytorch:24.05-py3 bash \"$KAKEHASHI_JOB_DIR/payload.sh\"") in script
    sif = SlurmBackend(None).render(_spec(container="/shared/images/torch.sif", launcher=Launcher.SCRIPT,
                                          resources=Resources(nodes=1)))
    assert 'apptainer exec --bind "$KAKEHASHI_JOB_DIR" /shared/images/torch.sif bash' in sif  # no --nv without GPUs


@pytest.mark.parametrize("stderr", [
    # Slurm 22.05's sbatch with slurmctld stopped (seen on the test cluster, tests/security/test_faults.py).
    "sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)",
    "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation",
])
def test_an_unreachable_controller_is_retryable_not_a_refusal(stderr):
    from backends.base import BackendError, SubmitRefused
    from backends.transport import CommandResult

    with pytest.raises(BackendError) as error:
        SlurmBackend(None, {}).parse_submit(CommandResult(1, "", stderr))
    assert not isinstance(error.value, SubmitRefused)
    with pytest.raises(SubmitRefused):  # what the scheduler refuses stays a refusal
        SlurmBackend(None, {}).parse_submit(CommandResult(
            1, "", "sbatch: error: Batch job submission failed: Requested node configuration is not available"))
