"""A job whose software is a container image runs inside that container, on Slurm and on Grid Engine.

The test cluster has no Apptainer (there is none for this machine kind): its `apptainer` is a stand-in built on
bubblewrap (tests/cluster/apptainer), which runs `apptainer exec` in a sandbox image made from the cluster's own
packages and job Python environment. The job checks from the inside that it is in the image: the image's
marker file, a mount namespace of its own, none of the host's files, the image's Python.
"""

from __future__ import annotations

import re

import pytest

from portal.catalog.models import HardwareType, Software
from portal.dev.loopback import CONTAINER_IMAGE
from portal.jobs.actions.submit import submit_job
from portal.jobs.actions.validation import JobRequest
from portal.jobs.models import Job, JobState
from tests.conftest import QUEUE_WAIT, ended_job, job_output, wait_for

pytestmark = [pytest.mark.cluster]

# Runs inside the container. Mount ids are unique across the machine, so a process whose root is another mount
# lives in another mount namespace: the first ancestor with a different root is the launcher outside. (The
# namespace links of processes outside are not readable from inside; stat's comm may hold spaces: cut at ")".)
INSIDE = r"""
root_mount() { awk '$5 == "/" {print $1; exit}' "/proc/$1/mountinfo" 2>/dev/null; }
me=$(root_mount self)
p=$PPID outer=none
while [ "${p:-0}" -gt 1 ]; do
    r=$(root_mount "$p")
    if [ -n "$r" ] && [ "$r" != "$me" ]; then outer=$r; break; fi
    stat=$(cat "/proc/$p/stat" 2>/dev/null) || break
    rest=${stat##*) }; rest=${rest#* }; p=${rest%% *}
done
echo "image: $(cat /etc/kakehashi-image)"
echo "root mount: $me, launcher's: $outer"
echo "mount namespace: $(readlink /proc/self/ns/mnt)"
if [ -e /etc/slurm/slurm.conf ] || [ -e /var/lib/gridengine ]; then echo "host files: visible"; else echo "host files: hidden"; fi
python -c 'import sys, torch, papermill; print("python", sys.executable, "torch", torch.__version__)'
echo "job directory: $(ls "$KAKEHASHI_JOB_DIR/payload.sh")"
"""


@pytest.fixture(scope="module")
def login(transport_for):
    return transport_for("slurm", "alice")


def _run(site, hardware: str, software: Software, script: str) -> Job:
    job = submit_job(site.alice, JobRequest(
        project=site.project, name=f"container-{hardware}", script=script, walltime="00:10:00",
        hardware=HardwareType.objects.get(slug=hardware), software=software)).job
    return wait_for(lambda: ended_job(job.pk), timeout=QUEUE_WAIT + 120,
                    message=f"the container job on {hardware}")


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("hardware", ["slurm-a100x8", "tsubame-f-node"], ids=["slurm", "tsubame"])
def test_a_job_whose_software_is_a_container_image_runs_inside_the_image(hpc_site, live_worker, login, hardware):
    # The login node (the same machine as the compute nodes here) has neither the image's marker nor its namespace.
    outside = login.run_shell("readlink /proc/self/ns/mnt; test -e /etc/kakehashi-image || echo no-marker")
    login_namespace, no_marker = outside.stdout.split()
    assert no_marker == "no-marker"
    job = _run(hpc_site, hardware, Software.objects.get(image=CONTAINER_IMAGE), INSIDE)
    stdout, stderr = job_output(job, "stdout"), job_output(job, "stderr")
    assert job.state == JobState.COMPLETED, f"{stdout}\n--- stderr ---\n{stderr}\n{job.state_reason}"
    assert f'apptainer exec --nv --bind "$KAKEHASHI_JOB_DIR" {CONTAINER_IMAGE} bash "$KAKEHASHI_JOB_DIR/payload.sh"' \
        in job.rendered_script
    assert f"image: {CONTAINER_IMAGE}" in stdout
    inside, launcher = re.search(r"^root mount: (\d+), launcher's: (\S+)$", stdout, re.MULTILINE).groups()
    assert launcher.isdigit() and inside != launcher, stdout
    namespace = re.search(r"^mount namespace: (mnt:\[\d+\])$", stdout, re.MULTILINE).group(1)
    assert namespace != login_namespace
    assert "host files: hidden" in stdout
    assert re.search(r"^python /opt/kakehashi-cluster/pyenv/bin/python torch 2\.13\.0", stdout, re.MULTILINE), stdout
    assert "job directory: " in stdout and "payload.sh" in stdout  # the job directory is bound in
    # --nv reached apptainer, and there is no GPU driver to map here (as a real Apptainer would say).
    assert "Could not find any nv files on this host" in stderr


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_an_image_the_cluster_does_not_have_fails_the_job_with_apptainers_message(hpc_site, live_worker):
    missing = Software.objects.create(slug="missing-image", name="Not on this cluster", kind=Software.Kind.CONTAINER,
                                      image="docker://example.org/nobody/missing:1.0")
    missing.clusters.add(*hpc_site.clusters.values())
    job = _run(hpc_site, "slurm-a100x1", missing, "echo never\n")
    stderr = job_output(job, "stderr")
    # apptainer's FATAL exits 255 (the job's own record, kakehashi-exit-status, says so); slurmdbd keeps 7 bits of
    # a batch script's exit code and says 127, so the figure comes from slurmctld (docs/decisions/0016).
    assert job.state == JobState.FAILED and job.exit_code == 255, f"{job.state_reason}\n{stderr}"
    assert "FATAL:" in stderr and "docker://example.org/nobody/missing:1.0 is not available" in stderr
    assert "never" not in job_output(job, "stdout")


# ---------------------------------------------------------------------------- the stand-in, as a user runs it


def test_the_stand_in_runs_a_sandbox_directory_image_with_the_users_binds(login):
    result = login.run_shell(
        "mkdir -p ~/container-data && echo hello > ~/container-data/in.txt && "
        "apptainer exec --bind ~/container-data:/data:ro /opt/kakehashi-cluster/images/pytorch-24.05.sif "
        "sh -c 'cat /data/in.txt; cat /etc/kakehashi-image; id -un; touch /data/x 2>&1 || true; touch /x 2>&1 || true'")
    assert result.ok, result.message
    lines = result.stdout.splitlines()
    assert lines[:3] == ["hello", CONTAINER_IMAGE, "alice"]
    assert "Read-only file system" in lines[3] and "Read-only file system" in lines[4]  # :ro bind, read-only image


@pytest.mark.parametrize(("command", "message"), [
    ("apptainer run docker://nvcr.io/nvidia/pytorch:24.05-py3", "only 'apptainer exec' is"),
    ("apptainer exec --writable docker://nvcr.io/nvidia/pytorch:24.05-py3 true", "option --writable is not supported"),
    ("apptainer exec library://alpine true", "library:// images are not supported"),
    ("printf 'SIF_MAGIC' > ~/fake.sif && apptainer exec ~/fake.sif true", "is a SIF file"),
    ("apptainer exec /nonexistent.sif true", "no such file or directory"),
    ("apptainer exec --bind /nonexistent docker://nvcr.io/nvidia/pytorch:24.05-py3 true", "doesn't exist"),
    ("apptainer exec --bind /tmp:/usr/lib/nowhere docker://nvcr.io/nvidia/pytorch:24.05-py3 true",
     "does not exist in the image"),
    ("apptainer exec docker://nvcr.io/nvidia/pytorch:24.05-py3", "usage: apptainer exec"),
])
def test_the_stand_in_refuses_what_it_does_not_emulate_with_a_clear_message(login, command, message):
    result = login.run_shell(command)
    assert result.exit_status == 255, result
    assert result.stderr.startswith("FATAL:") and message in result.stderr, result.stderr


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_ddp_ranks_started_by_mpirun_each_run_in_the_container_on_two_tsubame_nodes(hpc_site, live_worker):
    """The TSUBAME pattern: mpirun outside, one `apptainer exec` per rank, the ranks talking across nodes."""
    job = submit_job(hpc_site.alice, JobRequest(
        project=hpc_site.project, name="ddp-in-container", template="ddp-mnist", script="", launcher="mpirun",
        procs_per_node=2, nodes=2, walltime="00:10:00", env={"EPOCHS": "2", "SAMPLES": "1024"},
        hardware=HardwareType.objects.get(slug="tsubame-f-node"),
        software=Software.objects.get(image=CONTAINER_IMAGE))).job
    assert f'-x KAKEHASHI_OUTPUT_DIR apptainer exec --nv --bind "$KAKEHASHI_JOB_DIR" {CONTAINER_IMAGE} bash' \
        in job.rendered_script
    job = wait_for(lambda: ended_job(job.pk), timeout=QUEUE_WAIT + 240, message="DDP in the container")
    stdout = job_output(job, "stdout")
    assert job.state == JobState.COMPLETED, f"{stdout}\n--- stderr ---\n{job_output(job, 'stderr')}"
    assert "world size 4 (cpu, gloo)" in stdout
    reports = re.findall(r"^rank \d of 4 \(local rank (\d)\) on (sgenode0[12])$", stdout, re.MULTILINE)
    assert sorted(reports) == [("0", "sgenode01"), ("0", "sgenode02"), ("1", "sgenode01"), ("1", "sgenode02")]
