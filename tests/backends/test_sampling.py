"""The sampler's output read back: nvidia-smi's CSV on recorded outputs (fixtures/nvidia_smi/README.md), the
sampler itself run for real on this machine, and the batched fetch of new bytes run by a real shell."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from backends.base import JobSpec, Resources
from backends.local import LocalBackend
from backends.sampling import FetchRequest, fetch_command, parse_fetch, parse_gpu_csv, parse_samples
from backends.script import SAMPLER_FILE, SAMPLER_SOURCE
from backends.slurm import SlurmBackend
from backends.transport import LocalTransport

FIXTURES = Path(__file__).parent / "fixtures" / "nvidia_smi"
STANDIN = Path(__file__).parents[1] / "cluster" / "nvidia-smi-standin"


def _gpus(name: str):
    return [parse_gpu_csv(1, line) for line in (FIXTURES / name).read_text().splitlines()]


def test_eight_busy_a100s_read_as_eight_gpus_with_their_utilisation_memory_and_power():
    gpus = _gpus("a100-8x-training.csv")
    assert [g.index for g in gpus] == list(range(8))
    assert gpus[2].utilization == 99 and gpus[2].memory_used_mib == 71245 and gpus[2].memory_total_mib == 81920
    assert gpus[2].power_w == pytest.approx(401.90)
    assert gpus[0].uuid == "GPU-0f3d1b8e-7a2c-4c4e-9d1a-3b5e6f7a8b90"


def test_not_available_fields_are_unknown_never_zero():
    power_na, silent = _gpus("t4-power-na.csv")
    assert power_na.utilization == 35 and power_na.power_w is None
    assert silent.utilization is None and silent.memory_used_mib is None and silent.memory_total_mib is None


def test_a_mig_enabled_gpu_has_no_utilisation_but_its_memory_counts():
    mig, plain = _gpus("a100-mig-enabled.csv")
    assert mig.utilization is None and mig.memory_used_mib == 13824
    assert plain.utilization == 0


def test_lines_that_are_not_the_query_are_refused():
    assert parse_gpu_csv(1, (FIXTURES / "nvidia-smi-no-driver.txt").read_text()) is None
    assert parse_gpu_csv(1, "2024/01/01 00:00:00.000, x, GPU-1, 1, 2, 3, 4") is None
    assert parse_gpu_csv(1, "2024/01/01 00:00:00.000, 0, GPU-1, 1, 2, 3") is None


def test_a_node_file_recorded_on_the_tsubame_style_test_cluster_reads_whole():
    parsed = parse_samples((FIXTURES / "sampler-tsubame-sgenode01.log").read_text())
    (header,) = parsed.headers
    assert header.node == "sgenode01" and header.interval == 2 and header.nvidia_smi
    assert len(parsed.procs) >= 4 and parsed.procs[0].procs >= 1 and parsed.procs[0].rss_kb > 0
    assert len(parsed.gpus) == 2 * len(parsed.procs) and parsed.unreadable == 0


def test_garbage_lines_are_counted_and_never_read_as_samples():
    parsed = parse_samples("p 12 x 3 4\ng notatime 1\nhello\n# something else\ne 5 nvidia-smi: failed\n")
    assert parsed.procs == [] and parsed.gpus == [] and parsed.unreadable == 4
    assert parsed.errors == [(5, "nvidia-smi: failed")]


@pytest.fixture
def standin(tmp_path):
    """The test cluster's nvidia-smi stand-in in a directory of this test's, answering from `gpus.csv` there."""
    shutil.copy(STANDIN, tmp_path / "nvidia-smi")
    return tmp_path


def test_the_standin_prints_the_recorded_lines_with_the_time_of_asking(standin):
    shutil.copy(FIXTURES / "a100-mig-enabled.csv", standin / "gpus.csv")
    query = ["--query-gpu=timestamp,index,uuid,utilization.gpu,memory.used,memory.total,power.draw",
             "--format=csv,noheader,nounits"]
    out = subprocess.run([str(standin / "nvidia-smi"), *query], capture_output=True, text=True, check=True).stdout
    first = out.splitlines()[0]
    assert first.endswith(", 0, GPU-c5f3d9e4-2a6b-4c7d-1e0f-9a8b7c6d5e43, [N/A], 13824, 81920, 91.45")
    assert first.startswith(time.strftime("%Y/%m/%d "))
    (standin / "gpus.csv").unlink()
    gone = subprocess.run([str(standin / "nvidia-smi"), *query], capture_output=True, text=True)
    assert gone.returncode == 9 and "couldn't communicate with the NVIDIA driver" in gone.stdout


def _ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime, stime


def _run_sampler(job_dir: Path, smi: str, seconds: float) -> int:
    """Run the sampler beside a busy "job" process until it took `seconds` samples; the busy process's CPU ticks."""
    (job_dir / SAMPLER_FILE).write_bytes(SAMPLER_SOURCE)
    env = {**os.environ, "KAKEHASHI_JOB_DIR": str(job_dir)}
    # A busy "job" process beside it: its CPU must show in the samples.
    busy = subprocess.Popen(["sh", "-c", "while :; do :; done"], env=env)
    sampler = subprocess.Popen(["sh", str(job_dir / SAMPLER_FILE), str(job_dir), "1", smi, "node01"], env=env)
    try:
        deadline = time.monotonic() + seconds + 10
        log = job_dir / "kakehashi-samples" / "node01.log"
        while time.monotonic() < deadline:
            if log.exists() and log.read_text().count("\np ") >= seconds:
                break
            time.sleep(0.2)
        (job_dir / "kakehashi-exit-status").write_text("0\n")
        sampler.wait(timeout=5)  # it stops by itself once the job's exit status is there
        return _ticks(busy.pid)
    finally:
        busy.kill()
        sampler.kill()


def test_the_sampler_records_the_jobs_cpu_and_memory_and_each_gpu_then_stops_with_the_job(tmp_path, standin):
    shutil.copy(FIXTURES / "h100-2x-idle.csv", standin / "gpus.csv")
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    busy_ticks = _run_sampler(job_dir, str(standin / "nvidia-smi"), 3)
    parsed = parse_samples((job_dir / "kakehashi-samples" / "node01.log").read_text())
    assert parsed.headers[0].nvidia_smi and parsed.unreadable == 0
    assert len(parsed.procs) >= 3 and all(p.procs >= 1 for p in parsed.procs)
    # The busy loop's CPU as the kernel counts it, however loaded the machine: growing, and never more than it used.
    first, last = parsed.procs[0], parsed.procs[-1]
    assert first.cpu_ticks < last.cpu_ticks <= busy_ticks
    assert {g.index for g in parsed.gpus} == {0, 1} and all(g.utilization == 0 for g in parsed.gpus)


def test_a_sampler_whose_launcher_is_killed_stops_within_seconds_though_the_job_never_wrote_its_exit_status(tmp_path):
    """What Grid Engine's qdel does to a two-node job on the test cluster: it kills Open MPI's daemon on the second
    node, not the sampler rank the daemon put in a process group of its own. That sampler once ran on for days."""
    import signal

    job_dir = tmp_path / "job"
    job_dir.mkdir()
    (job_dir / SAMPLER_FILE).write_bytes(SAMPLER_SOURCE)
    launcher = subprocess.Popen(["sh", "-c", f'setsid sh "{job_dir / SAMPLER_FILE}" "{job_dir}" 1 /nonexistent n1 & '
                                             'echo $!; wait'], stdout=subprocess.PIPE, text=True)
    sampler = int(launcher.stdout.readline())
    try:
        log = job_dir / "kakehashi-samples" / "n1.log"
        deadline = time.monotonic() + 20
        while not (log.exists() and log.read_text().count("\np ") >= 2) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert log.exists() and Path(f"/proc/{sampler}").exists(), "the sampler samples while its launcher runs"
        launcher.send_signal(signal.SIGKILL)
        launcher.wait(timeout=5)
        deadline = time.monotonic() + 5
        while Path(f"/proc/{sampler}").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        try:
            state = Path(f"/proc/{sampler}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            state = "gone"
        assert state in ("gone", "Z"), f"the sampler still runs ({state}) with its launcher killed"
        assert not (job_dir / "kakehashi-exit-status").exists()
    finally:
        try:
            os.kill(sampler, signal.SIGKILL)  # not left running on the machine when this fails
        except ProcessLookupError:
            pass


def test_a_sampler_whose_job_script_died_before_it_looked_stops_at_once_without_a_sample(tmp_path):
    """A scancel in a job's first second killed the job script between its fork of the sampler and the sampler's
    first look at its parent: the sampler, orphaned already, took init for what started it and sampled on with no
    job (24 minutes when seen, on the test cluster). The script names itself; a sampler whose parent is not the
    process it was told of is an orphan, whatever its parent is now (here the test, standing in for init)."""
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    (job_dir / SAMPLER_FILE).write_bytes(SAMPLER_SOURCE)
    script = subprocess.Popen(["sleep", "60"])  # the job script it was told of: alive, but not its parent
    try:
        env = {**os.environ, "KAKEHASHI_SAMPLER_LAUNCHER": str(script.pid)}
        sampler = subprocess.Popen(["sh", str(job_dir / SAMPLER_FILE), str(job_dir), "1", "/nonexistent", "n1"], env=env)
        try:
            assert sampler.wait(timeout=10) == 0
        finally:
            sampler.kill()  # not left running on the machine when this fails
        log = (job_dir / "kakehashi-samples" / "n1.log").read_text()
        assert log.startswith("# kakehashi-sampler 1 node=n1") and "\np " not in log
    finally:
        script.kill()
        script.wait()


def test_a_node_without_nvidia_smi_records_cpu_and_memory_and_says_so(tmp_path):
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    _run_sampler(job_dir, "/nonexistent/nvidia-smi", 2)
    parsed = parse_samples((job_dir / "kakehashi-samples" / "node01.log").read_text())
    assert parsed.headers[0].nvidia_smi is False
    assert parsed.procs and not parsed.gpus and not parsed.errors


def test_a_failing_nvidia_smi_is_recorded_as_such(tmp_path, standin):
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    _run_sampler(job_dir, str(standin / "nvidia-smi"), 2)  # no gpus.csv: the driver "cannot be reached"
    parsed = parse_samples((job_dir / "kakehashi-samples" / "node01.log").read_text())
    assert parsed.errors and "NVIDIA driver" in parsed.errors[0][1] and not parsed.gpus


def test_one_command_fetches_only_the_new_whole_lines_of_every_node_of_every_job(tmp_path):
    transport = LocalTransport(tmp_path)
    for job, nodes in (("a", ("node01", "node02")), ("b", ("gpu-7",))):
        d = tmp_path / job / "kakehashi-samples"
        d.mkdir(parents=True)
        for node in nodes:
            (d / f"{node}.log").write_text("p 1 1 10 100\np 2 1 20 100\np 3 1 3")  # the last line half written
    requests = [FetchRequest("7", "a", {"node01.log": 13}), FetchRequest("8", "b"), FetchRequest("9", "missing")]
    found = parse_fetch(transport.run_shell(fetch_command(requests)).stdout)
    assert set(found) == {"7", "8"}
    assert found["7"]["node01.log"].text == "p 2 1 20 100\n" and found["7"]["node01.log"].start == 13
    assert found["7"]["node02.log"].text == "p 1 1 10 100\np 2 1 20 100\n"
    assert found["8"]["gpu-7.log"].start == 0
    # A limit cuts at the last whole line within it.
    limited = parse_fetch(transport.run_shell(fetch_command(requests[:1], limit=20)).stdout)
    assert limited["7"]["node02.log"].text == "p 1 1 10 100\n"


def test_every_rendered_script_starts_the_sampler_per_node_and_stops_it():
    spec = JobSpec(name="kh-x", payload="true", walltime_seconds=60, resources=Resources(nodes=2), workdir="kk/x",
                   sample_seconds=30, nvidia_smi="/opt/site/bin/nvidia-smi")
    script = SlurmBackend(None).render(spec)
    assert "srun --overlap --nodes=2 --ntasks=2 --ntasks-per-node=1 sh" in script
    assert '"$KAKEHASHI_JOB_DIR" 30 /opt/site/bin/nvidia-smi' in script
    assert script.index("kakehashi-exit-status") < script.index('kill "$_kh_sampler"') < script.index("exit \"$status\"")
    single = LocalBackend(None).render(JobSpec(name="kh-x", payload="true", walltime_seconds=60, sample_seconds=5))
    assert "srun" not in single and "mpirun" not in single and "_kh_sampler=$!" in single
    # Started by the script itself, the sampler is told the script's process; through srun it has a launcher per node.
    assert "KAKEHASHI_SAMPLER_LAUNCHER=$$ sh " in single
    assert "srun --overlap --nodes=2 --ntasks=2 --ntasks-per-node=1 sh" in script
    assert script.count("KAKEHASHI_SAMPLER_LAUNCHER=$$") == 1  # the fallback where no per-node launcher exists
    assert "kakehashi-sampler" not in SlurmBackend(None).render(JobSpec(name="kh-x", payload="t", walltime_seconds=60))


@pytest.mark.cluster
def test_the_samples_of_a_thousand_running_jobs_come_back_in_one_command_over_ssh(transport_for):
    """A cycle of 1,000 jobs is a 200 kB script: more than Linux takes as one argument, so it goes on stdin."""
    transport = transport_for("slurm")
    base = f"kakehashi-jobs/test-thousand-{os.getpid()}"
    transport.run_shell(f"mkdir -p {base}/j999/kakehashi-samples && printf 'p 1 1 10 100\\np 2 1 20 100\\n' > "
                        f"{base}/j999/kakehashi-samples/node01.log")
    try:
        requests = [FetchRequest(str(i), f"{base}/j{i}", {"node01.log": 0, "node02.log": 0}) for i in range(1000)]
        assert len(fetch_command(requests)) > 128 * 1024
        found = SlurmBackend(transport).read_samples(requests)
        assert found["999"]["node01.log"].text == "p 1 1 10 100\np 2 1 20 100\n" and set(found) == {"999"}
    finally:
        transport.run_shell(f"rm -rf {base}")
