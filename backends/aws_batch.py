"""AWS Batch: a job definition revision per job, `submit_job` to a queue per hardware type, `describe_jobs` for
statuses and final records (100 ids a call), `cancel_job`/`terminate_job`, logs from CloudWatch Logs, a job's
files in the object store (docs/decisions/0013).

There is no login node and no shell: the backend overrides the scheduler methods themselves and talks to AWS
through boto3 clients it is given (`BatchClients`) or that `connect` builds from the cluster's region, endpoint
and credentials. A job's directory is a key prefix in the cluster's bucket: `submit` puts the rendered job
directory there as bundle.tar, the container's entrypoint (backends/batch_entrypoint.py) pulls it, runs job.sh,
and pushes outputs/ and its logs back. job.sh is the same script body every scheduler runs, with the Batch
dialect below; the image comes from the same Software row that runs under `apptainer exec --nv` on a cluster.
The job definition and the queue, rendering, are in backends/aws_batch_defs.py; setting a site up (compute
environments, queues) in backends/aws_batch_setup.py.

Why one module: it is one adapter, AWSBatchBackend, each of whose methods is one AWS call and its reading;
what is not that class is in its own module already (job definitions in aws_batch_defs, site setup in
aws_batch_setup, pure readers in aws_batch_parse, prices in aws_pricing).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from backends import aws_batch_defs as defs
from backends.aws_batch_parse import ENDED, QUEUED, STARTED, epoch_millis, parse_record, parse_status
from backends.base import (
    MAX_LISTED_DEPTH,
    MAX_LISTED_FILES,
    OUTPUTS_DIR,
    Access,
    Backend,
    BackendError,
    DataInput,
    DataRefused,
    JobRecord,
    JobSpec,
    JobStatus,
    Load,
    OutputListing,
    Reach,
    RemoteFile,
    StagingReport,
    State,
    SubmitRefused,
)
from backends.safety import validate_spec
from backends.sampling import SAMPLES_DIR, Chunk
from backends.script import Dialect, assemble, render_body, staging_archive
from backends.staging import check_inputs

BATCH_PAGE = 100  # describe_jobs takes at most 100 ids a call
ACTIVE_STATUSES = ("SUBMITTED", "PENDING", "RUNNABLE", "STARTING", "RUNNING")
_UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
# A job, an array's element ("<id>:<index>", counted from 0) or a multi-node job's node ("<id>#<node>").
_ID_RE = re.compile(rf"{_UUID}(:\d+|#\d+)?")


@dataclass
class BatchClients:
    """The boto3 clients the backend uses (tests pass clients of a moto server, or with a botocore Stubber)."""

    batch: Any
    s3: Any = None
    logs: Any = None
    sts: Any = None


@dataclass(frozen=True)
class CloudJob:
    """A job AWS runs in one of the portal's queues, as the reconciler sees it."""

    scheduler_id: str
    name: str
    status: str
    queue: str
    created_at: datetime | None
    started_at: datetime | None
    tags: Mapping[str, str]
    nodes: int
    timeout_seconds: int | None
    is_array: bool = False  # an array job itself (its elements are listed on their own while they run)


def _client_error(exc: Exception) -> tuple[str, str]:
    error = getattr(exc, "response", {}).get("Error", {}) if hasattr(exc, "response") else {}
    return str(error.get("Code", type(exc).__name__)), str(error.get("Message", exc))


def aws_client(access: Access, settings: Mapping[str, object], service: str, region: str | None = None):
    """A boto3 client for one of the cluster's services: its credentials (else the worker's own chain), its
    region, and the endpoints a site (or a test) sets instead of AWS's: `endpoint_url`, `s3_endpoint_url`.

    Clients are kept per (credentials, region, endpoint), like pooled SSH connections: making one costs tens of
    milliseconds, and boto3 clients are safe to share between threads."""
    region = region or str(settings.get("region") or "")
    if not region:
        raise BackendError("this AWS cluster has no region: a site admin must set options.region")
    endpoint = str(settings.get("endpoint_url") or "")
    if service == "s3":
        endpoint = str(settings.get("s3_endpoint_url") or endpoint)
    return _client(service, region, endpoint, access.key_id, access.secret, float(access.timeout))


@functools.lru_cache(maxsize=64)
def _client(service: str, region: str, endpoint: str, key_id: str, secret: str, timeout: float):
    import boto3
    from botocore.config import Config

    session = boto3.session.Session(aws_access_key_id=key_id or None, aws_secret_access_key=secret or None,
                                    region_name=region)
    config = Config(retries={"mode": "standard", "max_attempts": 4}, connect_timeout=timeout, read_timeout=timeout)
    if service == "s3":
        config = config.merge(Config(signature_version="s3v4", s3={"addressing_style": "path"}))
    return session.client(service, endpoint_url=endpoint or None, config=config)



class AWSBatchBackend(Backend):
    kind = "aws-batch"
    cancel_program = "AWS Batch CancelJob/TerminateJob"
    scheduler_name = "AWS Batch"
    reach = Reach.CLOUD_API
    supports_arrays = True
    element_separator = ":"
    directive_prefix = defs.DIRECTIVE_PREFIX
    id_pattern = _ID_RE
    dialect = Dialect(
        # Every node runs job.sh itself; the entrypoint tells each node the main node's address and one job id.
        hosts_command='echo "$KAKEHASHI_BATCH_MAIN_ADDR"',
        job_id_var="KAKEHASHI_BATCH_JOB_ID",
        multi_node_prefix="",
        array_index_var="KAKEHASHI_BATCH_ARRAY_ELEMENT",
        # The entrypoint pulls a job's inputs into inputs/ (its datasets are inputs, see stage_data).
        data_dir="inputs/data",
    )

    def __init__(self, clients: BatchClients | None, settings: Mapping[str, object] | None = None) -> None:
        super().__init__(None, settings)
        self.aws = clients
        self._described: dict[str, dict] = {}

    @classmethod
    def connect(cls, access: Access, settings: Mapping[str, object] | None = None) -> Backend:
        settings = dict(settings or {})
        return cls(BatchClients(
            batch=aws_client(access, settings, "batch"),
            s3=aws_client(access, settings, "s3"),
            logs=aws_client(access, settings, "logs"),
            sts=aws_client(access, settings, "sts"),
        ), settings)

    def _clients(self) -> BatchClients:
        if self.aws is None:
            raise BackendError("this AWS Batch backend only renders job definitions: it has no connection")
        return self.aws

    @property
    def bucket(self) -> str:
        bucket = str(self.settings.get("bucket") or "")
        if not bucket:
            raise BackendError("this AWS Batch cluster has no bucket for job files: a site admin must set options.bucket")
        return bucket

    def _call(self, what: str, method, **kwargs) -> dict:
        """One AWS call; its refusal (a ClientError) or an unreachable endpoint as BackendError."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return method(**kwargs)
        except ClientError as exc:
            code, message = _client_error(exc)
            raise BackendError(f"{what} failed: {code}: {message}") from None
        except BotoCoreError as exc:
            raise BackendError(f"{what} failed: {exc}") from None

    # ------------------------------------------------------------------------------------------- rendering

    def directives(self, spec: JobSpec) -> list[str]:
        return defs.directive_lines(spec, self.settings)

    def render(self, spec: JobSpec) -> str:
        """job.sh with the job definition and the submit it will make written above it (the preview)."""
        validate_spec(spec)
        defs.check_spec(spec, self.settings)
        # The container is the image itself here: no `apptainer exec` inside it.
        return assemble("#!/bin/bash", self.directives(spec), render_body(replace(spec, container=""), self.dialect))

    def submit_command(self, spec: JobSpec) -> list[str]:
        return defs.submit_cli(spec, self.settings)


    # ------------------------------------------------------------------------------------------ submitting

    def submit(self, spec: JobSpec, script: str | None = None) -> str:
        """Put the job directory in the bucket, register the job definition revision, submit, record the id."""
        from botocore.exceptions import BotoCoreError, ClientError

        aws = self._clients()
        script = script if script is not None else self.render(spec)
        defs.check_spec(spec, self.settings)
        prefix = spec.workdir.rstrip("/")
        self._call("uploading the job directory", aws.s3.put_object, Bucket=self.bucket, Key=f"{prefix}/bundle.tar",
                   Body=staging_archive(spec, script))
        try:
            arn = aws.batch.register_job_definition(**defs.job_definition(spec, self.settings))["jobDefinitionArn"]
            job_id = aws.batch.submit_job(**defs.submit_request(spec, self.settings, arn))["jobId"]
        except ClientError as exc:
            code, message = _client_error(exc)
            if code == "ClientException":  # AWS Batch's word for a request it will never take (bad queue, size)
                raise SubmitRefused(message) from None
            raise BackendError(f"AWS Batch submit failed: {code}: {message}") from None
        except BotoCoreError as exc:
            raise BackendError(f"AWS Batch submit failed: {exc}") from None
        self._call("recording the job id", aws.s3.put_object, Bucket=self.bucket, Key=f"{prefix}/scheduler-id",
                   Body=job_id.encode())
        return job_id

    def find(self, spec: JobSpec) -> str | None:
        """The id an earlier attempt recorded in the bucket, else a job of this name in the queue."""
        recorded = self.read_file(spec.workdir, "scheduler-id").decode().strip()
        if _ID_RE.fullmatch(recorded):
            return recorded
        aws = self._clients()
        found = self._call("looking the job up by name", aws.batch.list_jobs, jobQueue=defs.queue_name(spec, self.settings),
                           filters=[{"name": "JOB_NAME", "values": [spec.name]}])
        jobs = sorted(found.get("jobSummaryList", []), key=lambda j: j.get("createdAt", 0))
        return jobs[-1]["jobId"] if jobs else None

    def element_id(self, array_id: str, index: int) -> str:
        return f"{array_id}:{index - 1}"  # Batch counts elements from 0, the portal from 1

    # ------------------------------------------------------------------------------------------- tracking

    def describe(self, scheduler_ids: Sequence[str]) -> dict[str, dict]:
        """describe_jobs for these ids, 100 a call; ids AWS no longer knows are absent."""
        aws = self._clients()
        ids = self.check_ids(scheduler_ids)
        found: dict[str, dict] = {}
        for start in range(0, len(ids), BATCH_PAGE):
            page = self._call("describe_jobs", aws.batch.describe_jobs, jobs=ids[start:start + BATCH_PAGE])
            for job in page.get("jobs", []):
                found[job["jobId"]] = job
        self._described.update(found)
        return found

    def statuses(self, scheduler_ids: Sequence[str]) -> dict[str, JobStatus]:
        return {job_id: parse_status(job) for job_id, job in self.describe(scheduler_ids).items()}

    def final_records(self, scheduler_ids: Sequence[str], *,
                      submitted_since: datetime | None = None) -> dict[str, JobRecord]:
        ids = self.check_ids(scheduler_ids)
        # The tracker asks for the records of jobs `statuses` just described: one describe_jobs serves both.
        known = {i: self._described[i] for i in ids if i in self._described and self._described[i]["status"]
                 in ENDED}
        missing = [i for i in ids if i not in known]
        described = {**known, **(self.describe(missing) if missing else {})}
        records = {i: parse_record(job) for i, job in described.items() if job["status"] in ENDED}
        for job_id, record in records.items():
            if record.state == State.FAILED and record.exit_code == defs.EXIT_BAD_INPUT:
                # The entrypoint refused to run the payload and said why in the job's directory.
                why = self._entrypoint_failure(described[job_id])
                if why:
                    records[job_id] = replace(record, reason=why)
        return records

    def _entrypoint_failure(self, job: Mapping[str, Any]) -> str:
        environment = {e.get("name"): e.get("value") for e in (job.get("container") or {}).get("environment") or []}
        prefix = str(environment.get("KAKEHASHI_S3_PREFIX") or "").rstrip("/")
        if not prefix:
            return ""
        index = (job.get("arrayProperties") or {}).get("index")
        if index is not None:  # an element pushes under its own directory, counted from 1 as in the portal
            prefix = f"{prefix}/{int(index) + 1}"
        return self.read_file(prefix, defs.FAILURE_FILE, limit=4096).decode("utf-8", "replace").strip()

    def cancel(self, scheduler_id: str, reason: str = defs.CANCEL_REASON) -> None:
        """`cancel_job` while it waits, `terminate_job` once it started; nothing once it ended. `reason` is what
        AWS records as the job's statusReason (and what tells a cancel from a walltime stop in its record)."""
        aws = self._clients()
        (job_id,) = self.check_ids([scheduler_id])
        job = self.describe([job_id]).get(job_id)
        if job is None or job["status"] in ENDED:
            return
        why = reason[:1000]
        if job["status"] in QUEUED:
            self._call("cancel_job", aws.batch.cancel_job, jobId=job_id, reason=why)
            # A job that started meanwhile ignores cancel_job (AWS Batch API reference): stop it for real.
            if self.describe([job_id]).get(job_id, {}).get("status") in STARTED:
                self._call("terminate_job", aws.batch.terminate_job, jobId=job_id, reason=why)
        else:
            self._call("terminate_job", aws.batch.terminate_job, jobId=job_id, reason=why)

    # ------------------------------------------------------------------------------- what runs, how busy

    def active_jobs(self, queues: Sequence[str]) -> list[CloudJob]:
        """Every job not ended in these queues (list_jobs per status, then describe_jobs for tags and sizes)."""
        aws = self._clients()
        ids: dict[str, str] = {}
        for queue in queues:
            for status in ACTIVE_STATUSES:
                for summary in self._pages(aws.batch.list_jobs, "jobSummaryList", jobQueue=queue, jobStatus=status):
                    ids[summary["jobId"]] = queue
                    if "size" in (summary.get("arrayProperties") or {}) and status == "RUNNING":
                        # An array runs as long as its elements take: each element is checked on its own.
                        for child in self._pages(aws.batch.list_jobs, "jobSummaryList", arrayJobId=summary["jobId"],
                                                 jobStatus="RUNNING"):
                            ids[child["jobId"]] = queue
        jobs = []
        for job_id, job in self.describe(list(ids)).items():
            if job["status"] not in ACTIVE_STATUSES:
                continue  # ended between the two calls
            nodes = (job.get("nodeProperties") or {}).get("numNodes") or 1
            is_array = "size" in (job.get("arrayProperties") or {})
            jobs.append(CloudJob(job_id, job.get("jobName", ""), job["status"], ids[job_id], epoch_millis(job.get("createdAt")),
                                 epoch_millis(job.get("startedAt")) if job["status"] in STARTED and not is_array else None,
                                 dict(job.get("tags") or {}), int(nodes),
                                 (job.get("timeout") or {}).get("attemptDurationSeconds"), is_array))
        return jobs

    def load(self, queues: Sequence[str] = ()) -> Load:
        """How many jobs wait for capacity (RUNNABLE) in each of these queues and how many run: how busy this
        hardware is now. Batch has no nodes to count (queues grow and shrink), so free nodes are unknown."""
        aws = self._clients()
        unavailable = self._unavailable_queues(list(queues))
        queues = [queue for queue in queues if queue not in unavailable]
        waiting = {queue: sum(1 for _ in self._pages(aws.batch.list_jobs, "jobSummaryList", jobQueue=queue,
                                                     jobStatus="RUNNABLE")) for queue in queues}
        running = sum(1 for queue in queues
                      for _ in self._pages(aws.batch.list_jobs, "jobSummaryList", jobQueue=queue, jobStatus="RUNNING"))
        return Load(pending=sum(waiting.values()), running=running, per_queue=waiting, unavailable=unavailable)

    def _unavailable_queues(self, queues: list[str]) -> dict[str, str]:
        """The queues that cannot take a job (missing after a teardown, disabled, or invalid), with why."""
        if not queues:
            return {}
        found = {}
        for start in range(0, len(queues), 100):  # describe_job_queues takes at most 100 names
            page = self._call("describe_job_queues", self._clients().batch.describe_job_queues,
                              jobQueues=queues[start:start + 100])
            found.update({q["jobQueueName"]: q for q in page.get("jobQueues", [])})
        why = {}
        for queue in queues:
            described = found.get(queue)
            if described is None:
                why[queue] = f"job queue {queue} does not exist (a site admin runs manage.py cloud_setup to create it)"
            elif described.get("state") != "ENABLED" or described.get("status") not in ("VALID", "UPDATING", None):
                why[queue] = (f"job queue {queue} is {described.get('state', '?').lower()} and "
                              f"{described.get('status', '?').lower()}: {described.get('statusReason', '')}").rstrip(": ")
        return why

    def _pages(self, method, key: str, **kwargs) -> Iterator[dict]:
        token = None
        while True:
            page = self._call(method.__name__, method, **kwargs, **({"nextToken": token} if token else {}))
            yield from page.get(key, [])
            token = page.get("nextToken")
            if not token:
                return

    # ------------------------------------------------------------------------------------- a job's files

    def _job_id_of(self, workdir: str) -> str | None:
        """The job whose directory this is: its recorded id, or an array element's from the array's."""
        recorded = self.read_file(workdir, "scheduler-id").decode().strip()
        if _ID_RE.fullmatch(recorded):
            return recorded
        parent, _, index = workdir.rstrip("/").rpartition("/")
        if parent and index.isdigit():
            array_id = self.read_file(parent, "scheduler-id").decode().strip()
            if _ID_RE.fullmatch(array_id):
                return self.element_id(array_id, int(index))
        return None

    def read_samples(self, requests, limit: int = 256 * 1024) -> dict:
        """The sampler's files the entrypoint pushed under each job's prefix, from each offset (whole lines): one
        listing and one ranged GET per job and node, not one command for all (an object store has none)."""
        from botocore.exceptions import ClientError

        found: dict = {}
        aws = self._clients()
        for request in requests:
            directory = f"{request.workdir.rstrip('/')}/{SAMPLES_DIR}/"
            try:
                listing = aws.s3.list_objects_v2(Bucket=self.bucket, Prefix=directory).get("Contents", [])
            except ClientError as exc:
                code, message = _client_error(exc)
                raise BackendError(f"listing s3://{self.bucket}/{directory} failed: {code}: {message}") from None
            for item in listing:
                name = item["Key"][len(directory):]
                offset = int(request.offsets.get(name, 0))
                if "/" in name or not name.endswith(".log") or item["Size"] <= offset:
                    continue
                data = self.read_file(request.workdir, f"{SAMPLES_DIR}/{name}", offset=offset, limit=limit)
                text = data.decode("ascii", "replace")
                whole = text[: text.rfind("\n") + 1] if "\n" in text else ""
                found.setdefault(request.key, {})[name] = Chunk(offset, whole, int(item["Size"]))
        return found

    def read_file(self, workdir: str, path: str, *, offset: int = 0, limit: int = 1 << 20) -> bytes:
        from botocore.exceptions import ClientError

        aws = self._clients()
        key = f"{workdir.rstrip('/')}/{path}"
        try:
            body = aws.s3.get_object(Bucket=self.bucket, Key=key, Range=f"bytes={offset}-{offset + limit - 1}")["Body"]
            return body.read()
        except ClientError as exc:
            code, message = _client_error(exc)
            if code in ("NoSuchKey", "404", "InvalidRange", "416"):
                return b""
            raise BackendError(f"reading s3://{self.bucket}/{key} failed: {code}: {message}") from None

    def stage_data(self, spec: JobSpec, project: str, datasets: Sequence[DataInput], *,
                   heartbeat=None) -> tuple[JobSpec, StagingReport]:
        """Batch stages nothing: the container pulls its inputs itself (backends/batch_entrypoint.py), so each
        object of a dataset becomes one of the spec's S3 inputs, at inputs/data/<name>[/<path>]. A path registered
        on a cluster has no meaning in the cloud."""
        check_inputs(project, datasets)
        inputs, checksums = dict(spec.inputs), dict(spec.input_sha256)
        report = StagingReport(container_source=str(self.settings.get("s3_endpoint_url") or "AWS S3"))
        for dataset in datasets:
            if dataset.cluster_path:
                raise DataRefused(f"dataset {dataset.name} is a path on a cluster: a cloud job cannot read it")
            for f in dataset.files:
                if not f.url.startswith("s3://"):
                    raise DataRefused(f"dataset {dataset.name}: the portal keeps its files on its own disk, where a "
                                      "cloud job cannot read them (an object store is needed)")
                path = f"data/{dataset.name}" + (f"/{f.path}" if f.path else "")
                inputs[path] = f.url
                if f.sha256:
                    checksums[path] = f.sha256  # checked by the container as the bytes arrive
                report.container_files += 1
                report.container_bytes += f.size
        return replace(spec, inputs=inputs, input_sha256=checksums), report

    def cache_entries(self, project: str, group: str = "") -> list:
        return []  # no cache: each container pulls its data from S3

    def prune_cache(self, project: str, shas, group: str = "") -> int:
        return 0

    def stream_file(self, workdir: str, path: str) -> Iterator[bytes]:
        key = f"{workdir.rstrip('/')}/{path}"
        body = self._call(f"reading s3://{self.bucket}/{key}", self._clients().s3.get_object, Bucket=self.bucket,
                          Key=key)["Body"]
        yield from body.iter_chunks(1 << 20)

    def read_output(self, workdir: str, stream: str, offset: int = 0, limit: int = 1 << 20) -> bytes:
        """stdout: the container's log in CloudWatch Logs (stdout and stderr together, as the AWS console shows
        it) while it exists, else the stdout.log the entrypoint pushed; stderr: the pushed stderr.log alone."""
        if stream == "stdout":
            text = self._cloudwatch_log(workdir)
            if text is not None:
                return text[offset:offset + limit]
        return self.read_file(workdir, f"{stream}.log", offset=offset, limit=limit)

    def _cloudwatch_log(self, workdir: str) -> bytes | None:
        from botocore.exceptions import ClientError

        job_id = self._job_id_of(workdir)
        job = self.describe([job_id]).get(job_id) if job_id else None
        if job is None:
            return None
        if "nodeProperties" in job:  # a multi-node job logs per node: the main node's is the job's
            main = f"{job_id}#{job['nodeProperties'].get('mainNode', 0)}"
            job = self.describe([main]).get(main, job)
        stream = (job.get("container") or {}).get("logStreamName")
        if not stream:
            return None
        lines, token = [], None
        group = str(self.settings.get("log_group") or "/aws/batch/job")
        try:
            while True:
                page = self._clients().logs.get_log_events(logGroupName=group, logStreamName=stream, startFromHead=True,
                                                           **({"nextToken": token} if token else {}))
                lines += [event["message"] for event in page.get("events", [])]
                if not page.get("events") or page.get("nextForwardToken") in (None, token):
                    break
                token = page["nextForwardToken"]
        except ClientError as exc:
            if _client_error(exc)[0] == "ResourceNotFoundException":
                return None  # not started yet, or the log expired: the pushed copy is what is left
            raise BackendError(f"reading CloudWatch Logs {group}/{stream} failed: {_client_error(exc)[1]}") from None
        return "".join(line if line.endswith("\n") else line + "\n" for line in lines).encode()

    def list_outputs(self, workdir: str, *, limit: int = MAX_LISTED_FILES,
                     depth: int = MAX_LISTED_DEPTH) -> OutputListing:
        """The objects the entrypoint pushed under the job's outputs/ prefix (an object store has no links)."""
        prefix = f"{workdir.rstrip('/')}/{OUTPUTS_DIR}/"
        files, more, deeper = [], False, False
        for item in self._pages(self._clients().s3.list_objects_v2, "Contents", Bucket=self.bucket, Prefix=prefix):
            path = item["Key"][len(prefix):]
            if path.count("/") >= depth:
                deeper = True
                continue
            if len(files) >= limit:
                more = True
                break
            files.append(RemoteFile(path, int(item["Size"])))
        return OutputListing(files, more=more, deeper=deeper)

    def whoami(self) -> str:
        return self._call("sts get_caller_identity", self._clients().sts.get_caller_identity)["Arn"]

    def close(self) -> None:
        self._described.clear()
