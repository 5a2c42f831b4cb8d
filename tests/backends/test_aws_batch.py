"""The AWS Batch backend against AWS's APIs served by moto and a real S3 server (SeaweedFS), over HTTP.

moto's Batch without Docker ends a job as it is submitted; where a test needs one waiting or running it holds
moto's record in that state (tests/moto_aws.py). What happens between states, Spot interruptions, retries and
settlement are in test_aws_batch_recorded.py, on recorded describe_jobs answers.
"""

from __future__ import annotations

import io
import json
import tarfile
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from backends import aws_batch_setup as setup
from backends.aws_batch import AWSBatchBackend
from backends.base import Access, ArrayElement, InvalidJobSpec, JobSpec, Launcher, Resources, State

P4D = {"instance_type": "p4d.24xlarge", "market": "on-demand"}
G5_SPOT = {"instance_type": "g5.xlarge", "market": "spot"}
IMAGE = "docker://nvcr.io/nvidia/pytorch:24.05-py3"


@pytest.fixture
def backend(aws_settings, cloud_bucket) -> AWSBatchBackend:
    store, _ = cloud_bucket
    batch = AWSBatchBackend.connect(Access(key_id=store.access_key, secret=store.secret_key), aws_settings)
    setup.ensure(batch.aws.batch, setup.site_plan(aws_settings, [("p4d.24xlarge", "on-demand", 192),
                                                                 ("g5.xlarge", "spot", 16)]))
    return batch


def spec(name="kh-0123456789-train", *, nodes=1, mapping=P4D, launcher=Launcher.SCRIPT, array=(), walltime=7200,
         payload="echo hello\n") -> JobSpec:
    return JobSpec(name=name, payload=payload, walltime_seconds=walltime, container=IMAGE, launcher=launcher,
                   resources=Resources(nodes=nodes, gpus_per_node=8, gpu_type="a100", cpus_per_node=96, memory_gb=1000,
                                       mapping=mapping),
                   workdir=f"kakehashi-jobs/{name}", env={"NCCL_DEBUG": "INFO"}, array=array,
                   labels={"project": "vision", "job": "0123456789abcdef", "user": "alice"})


def tags_of(name: str) -> dict[str, str]:
    return {"kakehashi:cluster": "aws", "kakehashi:project": "vision", "kakehashi:job": "0123456789abcdef",
            "kakehashi:user": "alice", "kakehashi:name": name}


def described(backend, job_id) -> dict:
    return backend.aws.batch.describe_jobs(jobs=[job_id])["jobs"][0]


def submit_as_sent(backend, s: JobSpec) -> tuple[str, dict]:
    """Submit `s`; the job id and the submit_job request as it went to AWS (moto's describe_jobs does not echo
    propagateTags back, AWS's does)."""
    sent, event = [], "before-parameter-build.batch.SubmitJob"

    def record(params, **_):
        sent.append(dict(params))

    backend.aws.batch.meta.events.register(event, record)
    try:
        job_id = backend.submit(s)
    finally:
        backend.aws.batch.meta.events.unregister(event, record)
    assert len(sent) == 1
    return job_id, sent[0]


def definition_of(backend, job) -> dict:
    return backend.aws.batch.describe_job_definitions(jobDefinitions=[job["jobDefinition"]])["jobDefinitions"][0]


# ------------------------------------------------------------------------------------------ setting up


def test_setup_creates_a_queue_per_hardware_type_scaling_from_zero_and_a_second_run_changes_nothing(aws_settings):
    from tests.moto_aws import MotoAWS

    batch = MotoAWS(aws_settings["endpoint_url"], aws_settings["region"]).client("batch")
    plan = setup.site_plan(aws_settings, [("p4d.24xlarge", "on-demand", 192), ("g5.xlarge", "spot", 16)])
    first = setup.ensure(batch, plan)
    assert [line.split()[0] for line in first] == ["created", "created", "registered"] * 2
    environments = {e["computeEnvironmentName"]: e for e in batch.describe_compute_environments()["computeEnvironments"]}
    spot = environments["kakehashi-aws-g5-xlarge-spot"]["computeResources"]
    on_demand = environments["kakehashi-aws-p4d-24xlarge-on-demand"]["computeResources"]
    assert (spot["type"], spot["minvCpus"], spot["instanceTypes"]) == ("SPOT", 0, ["g5.xlarge"])
    assert (on_demand["type"], on_demand["minvCpus"], on_demand["maxvCpus"]) == ("EC2", 0, 192)
    assert on_demand["subnets"] == aws_settings["subnets"]
    queues = batch.describe_job_queues()["jobQueues"]
    assert sorted(q["jobQueueName"] for q in queues) == sorted(environments)

    assert all(line.startswith("unchanged") for line in setup.ensure(batch, plan))
    assert len(batch.describe_job_definitions(status="ACTIVE")["jobDefinitions"]) == 2

    bigger = setup.site_plan(aws_settings, [("p4d.24xlarge", "on-demand", 384), ("g5.xlarge", "spot", 16)])
    assert "updated compute environment kakehashi-aws-p4d-24xlarge-on-demand" in setup.ensure(batch, bigger)


def test_teardown_removes_every_queue_environment_and_definition_of_the_cluster_and_may_run_twice(aws_settings):
    from tests.moto_aws import MotoAWS

    batch = MotoAWS(aws_settings["endpoint_url"], aws_settings["region"]).client("batch")
    setup.ensure(batch, setup.site_plan(aws_settings, [("p4d.24xlarge", "on-demand", 192), ("g5.xlarge", "spot", 16)]))
    others = {**aws_settings, "cluster": "other-site"}
    setup.ensure(batch, setup.site_plan(others, [("p5.48xlarge", "on-demand", 192)]))

    removed = setup.teardown(batch, "kakehashi-aws", wait=lambda s: None)
    assert sum(line.startswith("deleted job queue") for line in removed) == 2
    assert sum(line.startswith("deleted compute environment") for line in removed) == 2
    assert [q["jobQueueName"] for q in batch.describe_job_queues()["jobQueues"]] == ["kakehashi-other-site-p5-48xlarge-on-demand"]
    assert [d["jobDefinitionName"] for d in batch.describe_job_definitions(status="ACTIVE")["jobDefinitions"]] == [
        "kakehashi-other-site-p5-48xlarge-on-demand"]
    assert setup.teardown(batch, "kakehashi-aws", wait=lambda s: None) == []


def test_setup_refuses_a_cluster_without_its_network_saying_what_is_missing(aws_settings):
    from backends.base import BackendError

    with pytest.raises(BackendError, match="subnets, security_groups"):
        setup.site_plan({"region": "ap-northeast-1"}, [("p4d.24xlarge", "on-demand", 96)])


# ------------------------------------------------------------------------------------------ submitting


def test_a_single_node_job_gets_a_definition_with_its_gpus_walltime_and_tags_and_its_directory_in_the_bucket(
        backend, cloud_bucket):
    job_id, request = submit_as_sent(backend, spec())
    job = described(backend, job_id)
    assert job["jobName"] == "kh-0123456789-train"
    assert job["jobQueue"].endswith("/kakehashi-aws-p4d-24xlarge-on-demand")
    assert job["timeout"] == {"attemptDurationSeconds": 7200}
    assert job["tags"] == tags_of("kh-0123456789-train") and request["propagateTags"] is True
    definition = definition_of(backend, job)
    container = definition["containerProperties"]
    assert container["image"] == "nvcr.io/nvidia/pytorch:24.05-py3"
    assert {r["type"]: r["value"] for r in container["resourceRequirements"]} == {"GPU": "8", "VCPU": "96", "MEMORY": "1024000"}
    assert container["command"][:2] == ["python3", "-c"] and "def main()" in container["command"][2]
    assert definition["propagateTags"] is True and definition["timeout"] == {"attemptDurationSeconds": 7200}
    assert definition["tags"] == tags_of("kh-0123456789-train")
    env = {e["name"]: e["value"] for e in container["environment"]}
    assert env["KAKEHASHI_S3_PREFIX"] == "kakehashi-jobs/kh-0123456789-train"

    store, bucket = cloud_bucket
    bundle = store.client().get_object(Bucket=bucket, Key="kakehashi-jobs/kh-0123456789-train/bundle.tar")["Body"].read()
    names = tarfile.open(fileobj=io.BytesIO(bundle)).getnames()
    assert {"job.sh", "payload.sh"} <= set(names)


def test_the_same_software_row_is_apptainer_on_a_cluster_and_the_container_itself_on_batch(backend):
    from backends.slurm import SlurmBackend

    on_slurm = SlurmBackend(None).render(spec(mapping={"partition": "gpu"}))
    on_batch = backend.render(spec())
    assert "apptainer exec --nv" in on_slurm and "docker://nvcr.io/nvidia/pytorch:24.05-py3" in on_slurm
    assert "apptainer" not in on_batch.split("# ---- generated")[1]
    assert '"image": "nvcr.io/nvidia/pytorch:24.05-py3"' in on_batch


def test_what_batch_cannot_run_is_refused_before_anything_reaches_aws(backend):
    from dataclasses import replace

    with pytest.raises(InvalidJobSpec, match="environment modules"):
        backend.render(replace(spec(), container="", modules=("cuda/12.4",)))
    with pytest.raises(InvalidJobSpec, match="Apptainer image"):
        backend.render(replace(spec(), container="/shared/images/torch.sif"))
    with pytest.raises(InvalidJobSpec, match="instance type"):
        backend.render(spec(mapping={"partition": "gpu"}))
    with pytest.raises(InvalidJobSpec, match="torchrun"):
        backend.render(spec(nodes=2, launcher=Launcher.MPIRUN))
    with pytest.raises(InvalidJobSpec, match="on-demand"):
        backend.render(spec(nodes=2, mapping=G5_SPOT, launcher=Launcher.TORCHRUN))


def test_a_multi_node_job_is_a_multi_node_parallel_job_whose_nodes_meet_at_the_main_nodes_address(backend):
    s = spec(nodes=2, launcher=Launcher.TORCHRUN)
    script = backend.render(s)
    assert "srun" not in script and "mpirun" not in script
    assert 'torchrun --nnodes=2 --nproc-per-node=8 --rdzv-backend=c10d --rdzv-endpoint="$MASTER_ADDR:$MASTER_PORT"' in script
    assert '--rdzv-id="${KAKEHASHI_BATCH_JOB_ID:-kakehashi}"' in script
    assert 'echo "$KAKEHASHI_BATCH_MAIN_ADDR"' in script and "export NCCL_DEBUG=INFO" in script
    job_id, request = submit_as_sent(backend, s)
    job = described(backend, job_id)
    definition = definition_of(backend, job)
    assert definition["type"] == "multinode"
    # Tagged with whose it is and bounded by the walltime, as a single-node job: on the submit and its definition.
    assert job["tags"] == definition["tags"] == tags_of("kh-0123456789-train")
    assert job["timeout"] == definition["timeout"] == {"attemptDurationSeconds": 7200}
    assert request["propagateTags"] is True and definition["propagateTags"] is True
    nodes = job["nodeProperties"]
    assert (nodes["numNodes"], nodes["mainNode"], nodes["nodeRangeProperties"][0]["targetNodes"]) == (2, 0, "0:")
    env = {e["name"]: e["value"] for e in nodes["nodeRangeProperties"][0]["container"]["environment"]}
    assert env["KAKEHASHI_EVERY_NODE"] == "1"


def test_a_sweep_is_one_array_job_whose_elements_are_each_tracked_as_a_job(backend):
    elements = tuple(ArrayElement(i, env={"LR": lr}) for i, lr in enumerate(["0.1", "0.01", "0.001"], start=1))
    s = spec(name="kh-0123456789-sweep", array=elements)
    assert 'export KAKEHASHI_ARRAY_INDEX="${KAKEHASHI_BATCH_ARRAY_ELEMENT:-}"' in backend.render(s)
    array_id, request = submit_as_sent(backend, s)
    job = described(backend, array_id)
    assert job["arrayProperties"]["size"] == 3
    definition = definition_of(backend, job)
    assert job["tags"] == definition["tags"] == tags_of("kh-0123456789-sweep")
    assert job["timeout"] == definition["timeout"] == {"attemptDurationSeconds": 7200}
    assert request["propagateTags"] is True and definition["propagateTags"] is True
    ids = [backend.element_id(array_id, i) for i in (1, 2, 3)]
    assert ids == [f"{array_id}:0", f"{array_id}:1", f"{array_id}:2"]
    statuses = backend.statuses(ids)
    assert sorted(statuses) == sorted(ids) and {s.state for s in statuses.values()} == {State.COMPLETED}
    assert set(backend.final_records(ids)) == set(ids)


def test_a_spot_queue_retries_only_attempts_whose_instance_was_taken_back(backend):
    job = described(backend, backend.submit(spec(name="kh-0123456789-spot", mapping=G5_SPOT)))
    strategy = definition_of(backend, job)["retryStrategy"]
    assert strategy["attempts"] == 3
    first = strategy["evaluateOnExit"][0]
    assert (first["onStatusReason"], first["action"].upper()) == ("Host EC2*", "RETRY")


def test_a_retry_after_a_lost_reply_finds_the_job_by_its_recorded_id_or_by_name(backend, cloud_bucket):
    s = spec(name="kh-0123456789-lost")
    job_id = backend.submit(s)
    assert backend.find(s) == job_id
    store, bucket = cloud_bucket
    store.client().delete_object(Bucket=bucket, Key=f"{s.workdir}/scheduler-id")  # the reply and the record lost
    assert backend.find(s) == job_id
    assert backend.find(spec(name="kh-9999999999-never")) is None


def test_statuses_of_many_jobs_take_one_describe_jobs_call_per_hundred(backend):
    ids = [backend.submit(spec(name=f"kh-0123456789-many{i}", walltime=600)) for i in range(3)]
    calls = []
    backend.aws.batch.meta.events.register("before-parameter-build.batch.DescribeJobs", lambda params, **_: calls.append(len(params["jobs"])))
    backend.statuses(ids * 1)
    assert calls == [3]
    calls.clear()
    many = [str(uuid.uuid4()) for _ in range(250)]  # ids AWS does not know are simply absent
    assert set(backend.statuses([*ids, *many])) == set(ids)
    assert calls == [100, 100, 53]


# --------------------------------------------------------------------------------------------- cancel


def test_cancel_asks_cancel_job_of_a_waiting_job_and_terminate_job_of_a_started_one(backend, moto_aws):
    waiting, running = backend.submit(spec(name="kh-0123456789-wait")), backend.submit(spec(name="kh-0123456789-run"))
    moto_aws.hold(waiting, "RUNNABLE")
    moto_aws.hold(running, "RUNNING", started=datetime.now(UTC) - timedelta(minutes=5))
    calls = []
    backend.aws.batch.meta.events.register("before-call.batch.*", lambda model, **_: calls.append(model.name))
    backend.cancel(waiting)
    backend.cancel(running)
    assert [c for c in calls if c != "DescribeJobs"] == ["CancelJob", "TerminateJob"]
    assert moto_aws.stop_reason(waiting).startswith("Cancelled through Kakehashi")
    assert moto_aws.stop_reason(running).startswith("Cancelled through Kakehashi")


def test_cancelling_a_job_that_already_ended_is_not_an_error(backend):
    job_id = backend.submit(spec(name="kh-0123456789-done"))
    calls = []
    backend.aws.batch.meta.events.register("before-call.batch.*", lambda model, **_: calls.append(model.name))
    backend.cancel(job_id)
    assert calls == ["DescribeJobs"]


# ------------------------------------------------------------------------------------------ logs, files


def test_the_log_view_reads_the_jobs_cloudwatch_stream_and_outputs_come_from_the_bucket(backend, moto_aws, cloud_bucket):
    s = spec(name="kh-0123456789-logs")
    job_id = backend.submit(s)
    stream = described(backend, job_id)["container"]["logStreamName"]
    logs = moto_aws.client("logs")
    try:
        logs.create_log_group(logGroupName="/aws/batch/job")
    except logs.exceptions.ResourceAlreadyExistsException:
        pass
    logs.create_log_stream(logGroupName="/aws/batch/job", logStreamName=stream)
    now = int(datetime.now(UTC).timestamp() * 1000)
    logs.put_log_events(logGroupName="/aws/batch/job", logStreamName=stream,
                        logEvents=[{"timestamp": now, "message": "== Kakehashi job =="}, {"timestamp": now + 1, "message": "epoch 1"}])
    assert backend.read_output(s.workdir, "stdout") == b"== Kakehashi job ==\nepoch 1\n"
    assert backend.read_output(s.workdir, "stdout", offset=20) == b"epoch 1\n"

    store, bucket = cloud_bucket
    store.client().put_object(Bucket=bucket, Key=f"{s.workdir}/outputs/model/weights.pt", Body=b"1234")
    store.client().put_object(Bucket=bucket, Key=f"{s.workdir}/stderr.log", Body=b"warning\n")
    assert [(f.path, f.size) for f in backend.list_outputs(s.workdir).files] == [("model/weights.pt", 4)]
    assert backend.read_file(s.workdir, "outputs/model/weights.pt") == b"1234"
    assert backend.read_output(s.workdir, "stderr") == b"warning\n"
    assert backend.read_file(s.workdir, "outputs/none") == b""


def test_whoami_is_the_identity_aws_sees(backend):
    assert backend.whoami().startswith("arn:aws:")


def test_the_preview_shows_the_job_definition_and_the_submit_as_the_aws_cli_would_make_it(backend):
    s = spec()
    script = backend.render(s)
    shown = json.loads("\n".join(line[len("#AWSBATCH "):] for line in script.splitlines() if line.startswith("#AWSBATCH")))
    assert shown["containerProperties"]["command"][2] == f"<backends/batch_entrypoint.py, {len(open('backends/batch_entrypoint.py', 'rb').read())} bytes>"
    assert backend.directive_lines(script) == [line for line in script.splitlines() if line.startswith("#AWSBATCH")]
    command = backend.submit_command(s)
    assert command[:3] == ["aws", "batch", "submit-job"] and "--propagate-tags" in command


def test_how_busy_a_queue_is_is_the_number_of_jobs_waiting_in_it_for_capacity(backend, moto_aws):
    queue, spot = "kakehashi-aws-p4d-24xlarge-on-demand", "kakehashi-aws-g5-xlarge-spot"
    assert backend.load([queue]).pending == 0
    for i in range(2):
        moto_aws.hold(backend.submit(spec(name=f"kh-0123456789-wait{i}")), "RUNNABLE")
    moto_aws.hold(backend.submit(spec(name="kh-0123456789-runs")), "RUNNING")
    load = backend.load([queue, spot])
    assert (load.pending, load.running, dict(load.per_queue)) == (2, 1, {queue: 2, spot: 0})
    assert load.free_nodes is None  # Batch has no nodes to count: its queues grow and shrink


def test_an_entrypoint_baked_into_the_image_is_run_by_its_path_instead_of_inline(aws_settings):
    from backends import aws_batch_defs as defs

    baked = {**aws_settings, "entrypoint": "/opt/kakehashi/entrypoint.py"}
    assert defs.job_definition(spec(), baked)["containerProperties"]["command"] == ["python3", "/opt/kakehashi/entrypoint.py"]
    dockerfile = open("docker/batch/Dockerfile").read()
    assert "COPY backends/batch_entrypoint.py /opt/kakehashi/entrypoint.py" in dockerfile
