"""What an AWS Batch job is made of, from a JobSpec: its queue, its job definition revision, its submit request.

Pure functions (no AWS call), so the preview shows exactly what `submit` sends: the job definition as JSON in
`#AWSBATCH` lines above job.sh (the portal refuses an edit that changes them, as it does `#SBATCH` lines) and the
`aws batch submit-job` command beside it.

- The image is the Software row's container image, as on a cluster (`docker://` dropped: Batch pulls from the
  registry itself); an Apptainer file or environment modules cannot run on Batch and are refused.
- resourceRequirements: GPU = GPUs per node, VCPU = CPUs per node, MEMORY = the hardware's memory (MiB).
- timeout.attemptDurationSeconds = walltime (Batch's minimum is 60 s); tags name the project, the portal job,
  the user and the cluster, and propagateTags carries them to the ECS tasks and so to the instances' bill.
- Several nodes: a multi-node parallel job (`nodeProperties`, every node runs the same container, node 0 is
  the main one); a sweep: an array job (`arrayProperties.size`), each element running its own directory.
- Spot queues retry an attempt whose instance was taken back (`evaluateOnExit` on "Host EC2*"), up to the
  cluster's `spot_attempts` (3), and nothing else: a failing payload is not run again at the project's cost.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from backends.spec import InvalidJobSpec, JobSpec, Launcher

DIRECTIVE_PREFIX = "#AWSBATCH"
CANCEL_REASON = "Cancelled through Kakehashi"
# What the entrypoint exits with, and the file it leaves the reason in, when an input is not the bytes the portal
# recorded (backends/batch_entrypoint.py, which cannot import this: it runs alone in the container).
EXIT_BAD_INPUT = 65
FAILURE_FILE = "kakehashi-failure"
# What the portal's reconciler says when it stops a job itself (portal/cloud/reconciler.py).
RECONCILER_REASON = "Stopped by Kakehashi's reconciler"
WALLTIME_REASON = f"{RECONCILER_REASON}: past its walltime"
TAG_PREFIX = "kakehashi:"
ENTRYPOINT_FILE = Path(__file__).with_name("batch_entrypoint.py")
MARKETS = ("on-demand", "spot")
_TAG_VALUE = re.compile(r"[^A-Za-z0-9 +\-=._:/@]")
_NAME = re.compile(r"[^A-Za-z0-9_-]")


def resource_prefix(settings: Mapping[str, object]) -> str:
    """What every AWS resource of this cluster is named after: kakehashi-<cluster>."""
    return _NAME.sub("-", f"kakehashi-{settings.get('cluster') or 'batch'}")[:64]


def queue_for(instance_type: str, market: str, settings: Mapping[str, object]) -> str:
    """The job queue (and compute environment, and job definition family) of one hardware type."""
    if market not in MARKETS:
        raise InvalidJobSpec(f"market {market!r} is not one of {', '.join(MARKETS)}")
    return _NAME.sub("-", f"{resource_prefix(settings)}-{instance_type}-{market}")[:128]


def hardware_of(spec: JobSpec) -> tuple[str, str]:
    """(instance type, market) from the hardware type's mapping, e.g. {"instance_type": "p4d.24xlarge"}."""
    instance_type = spec.resources.mapping.get("instance_type", "")
    if not instance_type:
        raise InvalidJobSpec("this hardware type names no EC2 instance type: a site admin must set "
                             'scheduler_mapping {"instance_type": "p4d.24xlarge", "market": "on-demand"}')
    return instance_type, spec.resources.mapping.get("market", "on-demand")


def queue_name(spec: JobSpec, settings: Mapping[str, object]) -> str:
    return spec.resources.mapping.get("queue") or queue_for(*hardware_of(spec), settings)


def image_of(spec: JobSpec, settings: Mapping[str, object]) -> str:
    if spec.modules:
        raise InvalidJobSpec("AWS Batch runs container images, not environment modules: choose a container software")
    image = spec.container or str(settings.get("default_image") or "")
    if not image:
        raise InvalidJobSpec("AWS Batch runs a container image: choose a container software")
    if image.startswith("docker://"):
        image = image[len("docker://"):]
    if "://" in image or image.startswith("/") or image.endswith(".sif"):
        raise InvalidJobSpec(f"{image} is an Apptainer image; AWS Batch needs a registry image such as "
                             "nvcr.io/nvidia/pytorch:24.05-py3")
    return image


def check_spec(spec: JobSpec, settings: Mapping[str, object]) -> None:
    """What Batch cannot run, refused with a reason before anything reaches AWS."""
    image_of(spec, settings)
    instance_type, market = hardware_of(spec)
    queue_for(instance_type, market, settings)
    if spec.resources.nodes > 1 and spec.launcher == Launcher.MPIRUN:
        raise InvalidJobSpec("mpirun across nodes is not available on AWS Batch: use the torchrun launcher")
    if spec.resources.nodes > 1 and market == "spot":
        raise InvalidJobSpec("AWS Batch runs multi-node jobs on on-demand instances only: choose on-demand hardware")
    if spec.array and not 2 <= len(spec.array) <= 10_000:
        raise InvalidJobSpec("an AWS Batch array job has 2 to 10,000 elements")
    if spec.array and spec.resources.nodes > 1:
        raise InvalidJobSpec("AWS Batch cannot run an array of multi-node jobs")


def tags(spec: JobSpec, settings: Mapping[str, object]) -> dict[str, str]:
    labels = {"cluster": str(settings.get("cluster") or ""), **spec.labels, "name": spec.name}
    return {f"{TAG_PREFIX}{key}": _TAG_VALUE.sub("_", str(value))[:256] for key, value in labels.items() if value}


def entrypoint_command(settings: Mapping[str, object], *, shown: bool = False) -> list[str]:
    """The container's command: the entrypoint baked into the image (a path), or its source given inline."""
    baked = str(settings.get("entrypoint") or "")
    if baked:
        return ["python3", baked]
    source = _entrypoint_source()
    return ["python3", "-c", f"<backends/batch_entrypoint.py, {len(source.encode())} bytes>" if shown else source]


@functools.cache
def _entrypoint_source() -> str:
    return ENTRYPOINT_FILE.read_text()


def _container(spec: JobSpec, settings: Mapping[str, object], *, shown: bool) -> dict[str, Any]:
    res = spec.resources
    requirements = [{"type": "VCPU", "value": str(max(res.cpus_per_node, 1))},
                    {"type": "MEMORY", "value": str((res.memory_gb or 2) * 1024)}]
    if res.gpus_per_node:
        requirements.insert(0, {"type": "GPU", "value": str(res.gpus_per_node)})
    environment = {
        "KAKEHASHI_S3_BUCKET": str(settings.get("bucket") or ""),
        "KAKEHASHI_S3_PREFIX": spec.workdir.rstrip("/"),
        # A plain script on several nodes runs on the main one; torchrun runs on every node.
        "KAKEHASHI_EVERY_NODE": "1" if spec.launcher == Launcher.TORCHRUN else "0",
    }
    if settings.get("s3_endpoint_url"):
        environment["KAKEHASHI_S3_ENDPOINT_URL"] = str(settings["s3_endpoint_url"])
    if spec.inputs:
        environment["KAKEHASHI_INPUTS"] = json.dumps([_input(path, url, spec.input_sha256.get(path, ""))
                                                      for path, url in sorted(spec.inputs.items())])
    container: dict[str, Any] = {
        "image": image_of(spec, settings),
        "command": entrypoint_command(settings, shown=shown),
        "resourceRequirements": requirements,
        "environment": [{"name": k, "value": v} for k, v in environment.items()],
    }
    for option, field in (("job_role_arn", "jobRoleArn"), ("execution_role_arn", "executionRoleArn")):
        if settings.get(option):
            container[field] = str(settings[option])
    if res.gpus_per_node:
        # NCCL between GPUs of one node needs more shared memory than Docker's 64 MB default.
        container["linuxParameters"] = {"sharedMemorySize": int(settings.get("shared_memory_mib") or 16384)}
    return container


def _input(path: str, url: str, sha256: str = "") -> dict[str, str]:
    if not url.startswith("s3://") or "/" not in url[5:]:
        raise InvalidJobSpec(f"input {path}: {url!r} is not an s3://bucket/key address")
    if path.startswith("/") or ".." in path.split("/"):
        raise InvalidJobSpec(f"input path {path!r} must stay inside the job's inputs/ directory")
    bucket, _, key = url[5:].partition("/")
    if sha256 and not re.fullmatch(r"[0-9a-f]{64}", sha256):
        raise InvalidJobSpec(f"input {path}: {sha256!r} is not a SHA-256 in hex")
    return {"path": f"inputs/{path}", "bucket": bucket, "key": key, **({"sha256": sha256} if sha256 else {})}


def job_definition(spec: JobSpec, settings: Mapping[str, object], *, shown: bool = False) -> dict[str, Any]:
    """register_job_definition's arguments: one revision of the queue's family, for this job."""
    instance_type, market = hardware_of(spec)
    container = _container(spec, settings, shown=shown)
    definition: dict[str, Any] = {"jobDefinitionName": queue_name(spec, settings)}
    if spec.resources.nodes > 1:
        definition |= {"type": "multinode", "nodeProperties": {
            "numNodes": spec.resources.nodes, "mainNode": 0,
            "nodeRangeProperties": [{"targetNodes": "0:", "container": container}]}}
    else:
        definition |= {"type": "container", "containerProperties": container}
    definition |= {
        "timeout": {"attemptDurationSeconds": max(int(spec.walltime_seconds), 60)},
        "tags": tags(spec, settings),
        "propagateTags": True,
        "platformCapabilities": ["EC2"],
    }
    if market == "spot":
        definition["retryStrategy"] = {
            "attempts": int(settings.get("spot_attempts") or 3),
            "evaluateOnExit": [{"onStatusReason": "Host EC2*", "action": "RETRY"}, {"onReason": "*", "action": "EXIT"}],
        }
    return definition


def submit_request(spec: JobSpec, settings: Mapping[str, object], definition_arn: str) -> dict[str, Any]:
    """submit_job's arguments for the registered revision."""
    request: dict[str, Any] = {
        "jobName": spec.name,
        "jobQueue": queue_name(spec, settings),
        "jobDefinition": definition_arn,
        "tags": tags(spec, settings),
        "propagateTags": True,
        "timeout": {"attemptDurationSeconds": max(int(spec.walltime_seconds), 60)},
    }
    if spec.array:
        request["arrayProperties"] = {"size": len(spec.array)}
    return request


def directive_lines(spec: JobSpec, settings: Mapping[str, object]) -> list[str]:
    definition = json.dumps(job_definition(spec, settings, shown=True), indent=2)
    return [
        f"# AWS Batch: registered as a new revision of job definition {queue_name(spec, settings)} and submitted to",
        f"# job queue {queue_name(spec, settings)}; the container pulls this directory from "
        f"s3://{settings.get('bucket') or '<bucket>'}/{spec.workdir.rstrip('/')}/,",
        "# runs this script and pushes outputs/ back (backends/batch_entrypoint.py).",
        *(f"{DIRECTIVE_PREFIX} {line}" for line in definition.splitlines()),
    ]


def submit_cli(spec: JobSpec, settings: Mapping[str, object]) -> list[str]:
    """The submit as the AWS CLI would make it (what the preview shows beside the script)."""
    request = submit_request(spec, settings, f"{queue_name(spec, settings)}:<new revision>")
    argv = ["aws", "batch", "submit-job", "--region", str(settings.get("region") or "<region>"),
            "--job-name", request["jobName"], "--job-queue", request["jobQueue"],
            "--job-definition", request["jobDefinition"],
            "--timeout", f"attemptDurationSeconds={request['timeout']['attemptDurationSeconds']}",
            "--propagate-tags", "--tags", ",".join(f"{k}={v}" for k, v in request["tags"].items())]
    if spec.array:
        argv += ["--array-properties", f"size={len(spec.array)}"]
    return argv
