"""The IAM policies a site gives Kakehashi (docs/aws/) allow every AWS call the code makes: read from the source,
so a new call without its permission fails here rather than on a site's first job."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CALL = re.compile(r"\b(batch|s3|logs|sts|pricing|ec2)\.([a-z][a-z0-9_]+)\b")
# boto3 method → IAM action where the two are not simply the same name in CamelCase.
ACTIONS = {("s3", "list_objects_v2"): "s3:ListBucket", ("s3", "download_file"): "s3:GetObject",
           ("s3", "upload_file"): "s3:PutObject"}
NOT_CALLS = {"meta", "exceptions"}


def allowed(policy: str) -> set[str]:
    document = json.loads((ROOT / "docs" / "aws" / policy).read_text())
    actions = set()
    for statement in document["Statement"]:
        assert statement["Effect"] == "Allow"
        actions |= {statement["Action"]} if isinstance(statement["Action"], str) else set(statement["Action"])
    return actions


def called(*paths: Path) -> set[str]:
    actions = set()
    for path in paths:
        for service, method in CALL.findall(path.read_text()):
            if method in NOT_CALLS:
                continue
            camel = "".join(part.capitalize() for part in method.split("_"))
            actions.add(ACTIONS.get((service, method), f"{service}:{camel}"))
    return actions


def test_the_portals_policy_allows_every_aws_call_of_the_backend_the_setup_and_the_prices():
    sources = [ROOT / "backends" / name for name in ("aws_batch.py", "aws_batch_setup.py", "aws_pricing.py")]
    needed = called(*sources)
    assert {"batch:SubmitJob", "batch:DescribeJobs", "batch:TerminateJob", "logs:GetLogEvents",
            "batch:CreateComputeEnvironment", "pricing:GetProducts"} <= needed  # the scan finds what it should
    assert needed - allowed("kakehashi-portal-policy.json") == set()


def test_the_job_roles_policy_allows_what_the_container_entrypoint_does():
    needed = called(ROOT / "backends" / "batch_entrypoint.py")
    assert needed == {"s3:GetObject", "s3:PutObject"}
    assert needed <= allowed("kakehashi-job-role-policy.json")
    trust = json.loads((ROOT / "docs" / "aws" / "kakehashi-job-role-trust.json").read_text())
    assert trust["Statement"][0]["Principal"] == {"Service": "ecs-tasks.amazonaws.com"}
