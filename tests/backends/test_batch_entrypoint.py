"""The container's entrypoint, run for real as AWS Batch would run it: its command and environment read back from
the job AWS Batch (moto) holds, plus the variables Batch sets in every container, against a real S3 server
(SeaweedFS). It pulls the job directory and an input, runs the payload, pushes outputs/ and exits with the
payload's status. There is no container runtime here: the command runs as a process on this host.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from backends import aws_batch_setup as setup
from backends.aws_batch import AWSBatchBackend
from backends.base import Access, ArrayElement, JobSpec, Resources

P4D = {"instance_type": "p4d.24xlarge", "market": "on-demand"}
PAYLOAD = """\
set -e
echo "reading $(wc -l < inputs/data/points.csv) points"
mkdir -p "$KAKEHASHI_OUTPUT_DIR/plots"
awk -F, '{ s += $2 } END { print "sum", s }' inputs/data/points.csv > "$KAKEHASHI_OUTPUT_DIR/summary.txt"
echo "lr=${LR:-none}" > "$KAKEHASHI_OUTPUT_DIR/plots/params.txt"
echo "a warning" >&2
exit "${EXIT_WITH:-0}"
"""


@pytest.fixture
def backend(aws_settings, cloud_bucket) -> AWSBatchBackend:
    store, _ = cloud_bucket
    batch = AWSBatchBackend.connect(Access(key_id=store.access_key, secret=store.secret_key), aws_settings)
    setup.ensure(batch.aws.batch, setup.site_plan(aws_settings, [("p4d.24xlarge", "on-demand", 192)]))
    return batch


def run_as_batch(backend, job_id: str, store, workdir: Path, **batch_env: str) -> subprocess.CompletedProcess:
    """The job's container command with the environment Batch gives it (its definition's, Batch's own)."""
    job = backend.aws.batch.describe_jobs(jobs=[job_id.split(":")[0]])["jobs"][0]
    container = job.get("container") or job["nodeProperties"]["nodeRangeProperties"][0]["container"]
    command = container["command"]
    assert command[:2] == ["python3", "-c"]
    env = {
        "PATH": os.environ["PATH"], "HOME": str(workdir), "AWS_REGION": backend.settings["region"],
        "AWS_ACCESS_KEY_ID": store.access_key, "AWS_SECRET_ACCESS_KEY": store.secret_key,  # the job role's, on AWS
        "AWS_BATCH_JOB_ID": job_id, "AWS_BATCH_JOB_ATTEMPT": "1", "AWS_BATCH_JQ_NAME": job["jobQueue"].rsplit("/", 1)[-1],
        "AWS_BATCH_CE_NAME": job["jobQueue"].rsplit("/", 1)[-1], "KAKEHASHI_WORK_DIR": str(workdir),
        **{e["name"]: e["value"] for e in container["environment"] if not e["name"].startswith("AWS_BATCH")},
        **batch_env,
    }
    return subprocess.run([sys.executable, "-c", command[2]], env=env, capture_output=True, timeout=120)


def test_the_entrypoint_pulls_the_input_runs_the_payload_and_pushes_outputs_and_logs(backend, cloud_bucket, tmp_path):
    store, bucket = cloud_bucket
    store.client().put_object(Bucket=bucket, Key="projects/vision/points.csv", Body=b"a,1\nb,2\nc,39\n")
    spec = JobSpec(name="kh-aaaaaaaaaa-data", payload=PAYLOAD, walltime_seconds=600, workdir="kakehashi-jobs/kh-aaaaaaaaaa-data",
                   container="docker://python:3.12", env={"LR": "0.01"},
                   resources=Resources(cpus_per_node=2, memory_gb=4, mapping=P4D),
                   inputs={"data/points.csv": f"s3://{bucket}/projects/vision/points.csv"})
    job_id = backend.submit(spec)

    done = run_as_batch(backend, job_id, store, tmp_path / "container")
    assert done.returncode == 0, done.stderr.decode()
    assert b"reading 3 points" in done.stdout  # what CloudWatch Logs would hold
    assert sorted(f.path for f in backend.list_outputs(spec.workdir).files) == ["plots/params.txt", "summary.txt"]
    assert backend.read_file(spec.workdir, "outputs/summary.txt") == b"sum 42\n"
    assert backend.read_file(spec.workdir, "outputs/plots/params.txt") == b"lr=0.01\n"
    assert backend.read_output(spec.workdir, "stderr").endswith(b"a warning\n")
    assert backend.read_file(spec.workdir, "kakehashi-exit-status") == b"0\n"


def test_an_input_whose_bytes_do_not_match_its_checksum_fails_the_job_before_the_payload_runs(backend, cloud_bucket,
                                                                                              tmp_path):
    from backends import aws_batch_defs, batch_entrypoint

    store, bucket = cloud_bucket
    data = b"a,1\nb,2\n"
    store.client().put_object(Bucket=bucket, Key="projects/vision/good.csv", Body=data)
    store.client().put_object(Bucket=bucket, Key="projects/vision/swapped.csv", Body=b"not the uploaded bytes\n")
    claimed = hashlib.sha256(b"the uploaded bytes\n").hexdigest()
    spec = JobSpec(name="kh-eeeeeeeeee-liar", payload=PAYLOAD, walltime_seconds=600,
                   workdir="kakehashi-jobs/kh-eeeeeeeeee-liar", container="docker://python:3.12",
                   resources=Resources(mapping=P4D),
                   inputs={"data/points.csv": f"s3://{bucket}/projects/vision/good.csv",
                           "data/z.csv": f"s3://{bucket}/projects/vision/swapped.csv"},
                   input_sha256={"data/points.csv": hashlib.sha256(data).hexdigest(), "data/z.csv": claimed})
    job_id = backend.submit(spec)
    done = run_as_batch(backend, job_id, store, tmp_path / "container")

    assert done.returncode == batch_entrypoint.EXIT_BAD_INPUT == aws_batch_defs.EXIT_BAD_INPUT == 65
    assert b"checked sha256" in done.stderr  # the good one was checked and kept
    why = f"input inputs/data/z.csv (s3://{bucket}/projects/vision/swapped.csv, 23 bytes) does not match its checksum"
    assert why in done.stderr.decode()
    assert b"reading" not in done.stdout  # the payload never ran
    assert not (tmp_path / "container/inputs/data/z.csv").exists()
    assert list((tmp_path / "container/inputs/data").iterdir()) == [tmp_path / "container/inputs/data/points.csv"]
    assert backend.list_outputs(spec.workdir).files == []
    assert why in backend.read_file(spec.workdir, aws_batch_defs.FAILURE_FILE).decode()
    assert why in backend.read_output(spec.workdir, "stderr").decode()
    assert backend.read_file(spec.workdir, "kakehashi-exit-status") == b"65\n"


def test_the_container_exits_with_the_payloads_status_and_still_pushes_what_it_wrote(backend, cloud_bucket, tmp_path):
    store, bucket = cloud_bucket
    store.client().put_object(Bucket=bucket, Key="projects/vision/points.csv", Body=b"a,1\n")
    spec = JobSpec(name="kh-bbbbbbbbbb-fail", payload=PAYLOAD, walltime_seconds=600, workdir="kakehashi-jobs/kh-bbbbbbbbbb-fail",
                   container="docker://python:3.12", env={"EXIT_WITH": "3"}, resources=Resources(mapping=P4D),
                   inputs={"data/points.csv": f"s3://{bucket}/projects/vision/points.csv"})
    done = run_as_batch(backend, backend.submit(spec), store, tmp_path / "container")
    assert done.returncode == 3
    assert backend.read_file(spec.workdir, "outputs/summary.txt") == b"sum 1\n"
    assert backend.read_file(spec.workdir, "kakehashi-exit-status") == b"3\n"


def test_an_array_element_runs_in_its_own_directory_and_pushes_under_its_own_index(backend, cloud_bucket, tmp_path):
    store, bucket = cloud_bucket
    store.client().put_object(Bucket=bucket, Key="projects/vision/points.csv", Body=b"a,5\n")
    elements = tuple(ArrayElement(i, env={"LR": lr}) for i, lr in enumerate(["0.1", "0.2"], start=1))
    spec = JobSpec(name="kh-cccccccccc-sweep", payload=PAYLOAD, walltime_seconds=600, array=elements,
                   workdir="kakehashi-jobs/kh-cccccccccc-sweep", container="docker://python:3.12",
                   resources=Resources(mapping=P4D), inputs={"data/points.csv": f"s3://{bucket}/projects/vision/points.csv"})
    array_id = backend.submit(spec)
    second = backend.element_id(array_id, 2)
    done = run_as_batch(backend, second, store, tmp_path / "container", AWS_BATCH_JOB_ARRAY_INDEX="1")
    assert done.returncode == 0, done.stderr.decode()
    assert backend.read_file(f"{spec.workdir}/2", "outputs/plots/params.txt") == b"lr=0.2\n"
    assert backend.list_outputs(f"{spec.workdir}/1").files == []


JOB_PYTHON = Path("/opt/kakehashi-cluster/pyenv/bin")  # torch (CPU) as the test cluster's job environment has it


@pytest.mark.cluster
@pytest.mark.skipif(not (JOB_PYTHON / "torchrun").exists(), reason="needs the test cluster's job Python (torch)")
def test_a_two_node_job_trains_ddp_to_the_end_with_its_nodes_meeting_at_the_main_nodes_address(
        backend, cloud_bucket, tmp_path):
    """The DDP template as a multi-node parallel job: Batch starts the entrypoint on every node, each node runs
    one torchrun that meets the others at the main node's address. Two processes on this host play the two
    nodes, with the variables Batch sets on each (only the child is told the main node's address)."""
    import json as jsonlib

    from backends.base import Launcher
    from portal.catalog.job_templates import TEMPLATES

    store, _ = cloud_bucket
    template = TEMPLATES["ddp-mnist"]
    spec = JobSpec(name="kh-dddddddddd-ddp", payload='python train.py --epochs 2 --samples 512\n',
                   walltime_seconds=900, workdir="kakehashi-jobs/kh-dddddddddd-ddp", container="docker://python:3.12",
                   launcher=Launcher.TORCHRUN, procs_per_node=2, files=template.file_contents(),
                   resources=Resources(nodes=2, cpus_per_node=2, memory_gb=4, mapping=P4D))
    job_id = backend.submit(spec)
    job = backend.aws.batch.describe_jobs(jobs=[job_id])["jobs"][0]
    command = job["nodeProperties"]["nodeRangeProperties"][0]["container"]["command"]
    container_env = {e["name"]: e["value"]
                     for e in job["nodeProperties"]["nodeRangeProperties"][0]["container"]["environment"]}
    env = {"PATH": f"{JOB_PYTHON}:{os.environ['PATH']}", "AWS_REGION": backend.settings["region"],
           "AWS_ACCESS_KEY_ID": store.access_key, "AWS_SECRET_ACCESS_KEY": store.secret_key,
           "AWS_BATCH_JOB_NUM_NODES": "2", "AWS_BATCH_JOB_MAIN_NODE_INDEX": "0", **container_env}
    nodes = []
    for node in (0, 1):
        node_env = {**env, "HOME": str(tmp_path / f"node{node}"), "KAKEHASHI_WORK_DIR": str(tmp_path / f"node{node}"),
                    "AWS_BATCH_JOB_ID": f"{job_id}#{node}", "AWS_BATCH_JOB_NODE_INDEX": str(node)}
        if node:
            node_env["AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS"] = "127.0.0.1"
        nodes.append(subprocess.Popen([sys.executable, "-c", command[2]], env=node_env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    outs = [node.communicate(timeout=300) for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], outs[0][1].decode()[-3000:] + outs[1][1].decode()[-3000:]
    logs = outs[0][0].decode() + outs[1][0].decode()  # rank 0 prints, on whichever node it landed
    assert "world size 4 (cpu, gloo)" in logs and "final loss" in logs  # 2 nodes × 2 processes
    metrics = jsonlib.loads(backend.read_file(spec.workdir, "outputs/metrics.json"))
    assert metrics["world_size"] == 4 and metrics["losses"][-1] < metrics["losses"][0]


def test_the_sampler_runs_in_the_container_and_its_samples_reach_the_portal_while_the_job_runs(backend, cloud_bucket,
                                                                                                 tmp_path):
    import shutil
    import time

    from backends.sampling import FetchRequest, parse_samples

    store, _ = cloud_bucket
    gpus = tmp_path / "gpus"  # the nvidia-smi stand-in: this host has no GPU, and no container runtime
    gpus.mkdir()
    root = Path(__file__).parents[1]
    shutil.copy(root / "cluster" / "nvidia-smi-standin", gpus / "nvidia-smi")
    shutil.copy(root / "backends" / "fixtures" / "nvidia_smi" / "h100-2x-idle.csv", gpus / "gpus.csv")
    spec = JobSpec(name="kh-aaaaaaaaaa-gpus", payload="sleep 8", walltime_seconds=600,
                   workdir="kakehashi-jobs/kh-aaaaaaaaaa-gpus", container="docker://python:3.12",
                   resources=Resources(cpus_per_node=2, memory_gb=4, gpus_per_node=2, mapping=P4D),
                   sample_seconds=1, nvidia_smi=str(gpus / "nvidia-smi"))
    job_id = backend.submit(spec)
    job = backend.aws.batch.describe_jobs(jobs=[job_id])["jobs"][0]
    container = job["container"]
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "AWS_REGION": backend.settings["region"],
           "AWS_ACCESS_KEY_ID": store.access_key, "AWS_SECRET_ACCESS_KEY": store.secret_key,
           "AWS_BATCH_JOB_ID": job_id, "AWS_BATCH_JOB_ATTEMPT": "1", "KAKEHASHI_WORK_DIR": str(tmp_path / "c"),
           "KAKEHASHI_SAMPLE_PUSH_SECONDS": "1",
           **{e["name"]: e["value"] for e in container["environment"] if not e["name"].startswith("AWS_BATCH")}}
    running = subprocess.Popen([sys.executable, "-c", container["command"][2]], env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE)
    try:
        request = FetchRequest("1", spec.workdir)
        deadline = time.monotonic() + 30
        seen = {}
        while time.monotonic() < deadline and not seen:
            seen = backend.read_samples([request]).get("1", {})
            time.sleep(0.5)
        assert seen and running.poll() is None  # read while the job still runs
        assert running.wait(timeout=60) == 0, running.stderr.read().decode()
    finally:
        running.kill()
    ((name, chunk),) = backend.read_samples([request])["1"].items()
    parsed = parse_samples(chunk.text)
    assert parsed.headers[0].nvidia_smi and {g.index for g in parsed.gpus} == {0, 1} and len(parsed.procs) >= 3
    later = backend.read_samples([FetchRequest("1", spec.workdir, {name: len(chunk.text)})])
    assert later == {}  # nothing new past the offset once the job ended
