"""AWS's APIs for the cloud tests: moto's server on a free loopback port, started by the tests themselves.

Batch runs without Docker (there is no engine here): moto then marks a job SUCCEEDED (or FAILED) the moment it
is submitted, with no state in between (../shared/notes/cloud-and-s3.md). Where a test needs a job that waits
or runs, `hold` puts moto's own record of it in that state, as AWS would report it: this sets the fake
server's data, the way a database test inserts rows; every request still goes through boto3 over HTTP. State
transitions, Spot interruptions and retries are tested on recorded describe_jobs answers instead
(tests/backends/fixtures/aws_batch/).
"""

from __future__ import annotations

import json
import logging
import urllib.request
from dataclasses import dataclass
from datetime import datetime

ACCOUNT = "123456789012"  # moto's default account


@dataclass
class MotoAWS:
    endpoint: str
    region: str = "ap-northeast-1"
    server: object = None

    @classmethod
    def start(cls) -> MotoAWS:
        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per request otherwise
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        host, port = server.get_host_and_port()
        aws = cls(f"http://{host}:{port}", server=server)
        aws.configure({"batch": {"use_docker": False}})
        return aws

    def configure(self, config: dict) -> None:
        request = urllib.request.Request(f"{self.endpoint}/moto-api/config", data=json.dumps(config).encode(),
                                         method="POST")
        urllib.request.urlopen(request, timeout=10).read()  # noqa: S310 - loopback

    def reset(self) -> None:
        urllib.request.urlopen(urllib.request.Request(f"{self.endpoint}/moto-api/reset", method="POST"), timeout=10)  # noqa: S310
        self.configure({"batch": {"use_docker": False}})

    def stop(self) -> None:
        self.server.stop()

    def client(self, service: str):
        import boto3

        return boto3.client(service, endpoint_url=self.endpoint, region_name=self.region,
                            aws_access_key_id="testing", aws_secret_access_key="testing")

    def network(self) -> dict:
        """What a site creates once by hand (docs/decisions/0013): a VPC's subnet, a security group and the
        instance profile Batch's instances run with."""
        ec2, iam = self.client("ec2"), self.client("iam")
        vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
        subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.0.0/24")["Subnet"]["SubnetId"]
        group = ec2.create_security_group(GroupName=f"kakehashi-{vpc}", Description="Kakehashi jobs", VpcId=vpc)["GroupId"]
        profile = iam.create_instance_profile(InstanceProfileName=f"ecsInstanceRole-{vpc}")["InstanceProfile"]["Arn"]
        role = iam.create_role(RoleName=f"batch-service-{vpc}", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
        return {"subnets": [subnet], "security_groups": [group], "instance_role": profile, "service_role": role}

    def hold(self, job_id: str, status: str, *, started: datetime | None = None) -> None:
        """Put moto's job in `status` (RUNNABLE, RUNNING, …), started at `started`: what moto without Docker
        cannot reach by itself. Only for the server these tests started, in this process."""
        from moto.batch.models import batch_backends

        job = batch_backends[ACCOUNT][self.region].get_job_by_id(job_id)
        job.status = status
        job.job_stopped = False
        job.stop = False
        job.job_stopped_reason = None
        if started is not None:
            job.job_started_at = datetime.fromtimestamp(started.timestamp())  # moto keeps local naive times

    def stop_reason(self, job_id: str) -> str | None:
        """The reason moto recorded when cancel_job or terminate_job reached the job (AWS's statusReason)."""
        from moto.batch.models import batch_backends

        job = batch_backends[ACCOUNT][self.region].get_job_by_id(job_id)
        return job.job_stopped_reason if job.stop else None

    def end(self, job_id: str, exit_code: int) -> None:
        """End moto's job as AWS does once its container exits with `exit_code` (moto without Docker ends every
        job SUCCEEDED the moment it is submitted): the status, AWS's statusReason and the attempt's exit code."""
        from moto.batch.models import batch_backends

        job = batch_backends[ACCOUNT][self.region].get_job_by_id(job_id)
        job.status = "SUCCEEDED" if exit_code == 0 else "FAILED"
        job.job_stopped = True
        job.job_stopped_reason = None if exit_code == 0 else "Essential container in task exited"
        job.exit_code = exit_code
        for attempt in job.attempts[-1:]:
            attempt["container"]["exitCode"] = exit_code

    def stopped(self, job_id: str) -> None:
        """What AWS does once cancel_job or terminate_job has reached a running job: FAILED, with the reason the
        caller gave as its statusReason and the killed container's 137 (moto records the call but leaves a job held
        in RUNNING as it is)."""
        from moto.batch.models import batch_backends

        job = batch_backends[ACCOUNT][self.region].get_job_by_id(job_id)
        assert job.stop, "nobody asked AWS to stop this job"
        job.status, job.job_stopped, job.exit_code = "FAILED", True, 137
        for attempt in job.attempts[-1:]:
            attempt["container"]["exitCode"] = 137

    def write_log(self, job_id: str, lines: list[str]) -> str:
        """What Batch's awslogs driver does for a container: a stream in /aws/batch/job named
        <definition>/default/<task>, its lines as events, and the stream's name on the job. The group, stream and
        events are made through the Logs API over HTTP; only the name on moto's job record is set here, which
        moto without Docker never sets. Returns the stream's name."""
        import time

        from moto.batch.models import batch_backends

        job = batch_backends[ACCOUNT][self.region].get_job_by_id(job_id)
        logs, group = self.client("logs"), "/aws/batch/job"
        stream = f"{job.job_definition.name}/default/{job_id}"
        try:
            logs.create_log_group(logGroupName=group)
        except logs.exceptions.ResourceAlreadyExistsException:
            pass
        logs.create_log_stream(logGroupName=group, logStreamName=stream)
        now = int(time.time() * 1000)
        logs.put_log_events(logGroupName=group, logStreamName=stream,
                            logEvents=[{"timestamp": now + i, "message": line} for i, line in enumerate(lines)])
        job.log_stream_name = stream
        return stream
