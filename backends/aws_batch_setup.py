"""Setting an AWS Batch site up and tearing it down, idempotently: a compute environment and a job queue per
hardware type (minvCpus 0, so an idle site costs nothing), and a base job definition revision per queue.

Plain Python over a boto3 Batch client (`manage.py cloud_setup CLUSTER` builds the plan from the catalog). Run
twice, the second run changes nothing; `teardown` removes everything named after the cluster, including queues
of hardware types removed since. AWS only deletes a queue or an environment once it is DISABLED and VALID,
so each step waits for it (instant on moto, minutes on AWS).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from backends.aws_batch_defs import TAG_PREFIX, entrypoint_command, queue_for, resource_prefix
from backends.spec import BackendError

DEFAULT_IMAGE = "public.ecr.aws/docker/library/python:3.12-slim"


@dataclass(frozen=True)
class QueuePlan:
    """One hardware type's queue: its name (= its compute environment's and job definition family's)."""

    name: str
    instance_type: str
    market: str  # on-demand | spot
    max_vcpus: int


@dataclass(frozen=True)
class SitePlan:
    prefix: str
    queues: Sequence[QueuePlan]
    subnets: Sequence[str]
    security_groups: Sequence[str]
    instance_role: str  # the ECS instance profile's name or ARN
    service_role: str = ""  # empty: AWS Batch's service-linked role
    spot_bid_percentage: int = 100
    tags: Mapping[str, str] = field(default_factory=dict)
    image: str = DEFAULT_IMAGE
    command: Sequence[str] = ()


def site_plan(settings: Mapping[str, object], hardware: Sequence[tuple[str, str, int]]) -> SitePlan:
    """The plan for a cluster's settings and its hardware types' (instance type, market, max vCPUs)."""
    missing = [key for key in ("region", "subnets", "security_groups", "instance_role") if not settings.get(key)]
    if missing:
        raise BackendError(f"the cluster's options lack {', '.join(missing)} (see docs/decisions/0013)")
    queues = {}
    for instance_type, market, max_vcpus in hardware:
        name = queue_for(instance_type, market, settings)
        queues[name] = QueuePlan(name, instance_type, market, max(int(max_vcpus), 1))
    return SitePlan(
        prefix=resource_prefix(settings), queues=list(queues.values()),
        subnets=list(settings["subnets"]), security_groups=list(settings["security_groups"]),
        instance_role=str(settings["instance_role"]), service_role=str(settings.get("service_role") or ""),
        spot_bid_percentage=int(settings.get("spot_bid_percentage") or 100),
        tags={f"{TAG_PREFIX}cluster": str(settings.get("cluster") or "")},
        image=str(settings.get("default_image") or DEFAULT_IMAGE), command=entrypoint_command(settings),
    )


def _compute_resources(plan: SitePlan, queue: QueuePlan) -> dict:
    spot = queue.market == "spot"
    resources = {
        "type": "SPOT" if spot else "EC2",
        "allocationStrategy": "SPOT_PRICE_CAPACITY_OPTIMIZED" if spot else "BEST_FIT_PROGRESSIVE",
        "minvCpus": 0,
        "maxvCpus": queue.max_vcpus,
        "instanceTypes": [queue.instance_type],
        "subnets": list(plan.subnets),
        "securityGroupIds": list(plan.security_groups),
        "instanceRole": plan.instance_role,
        "tags": dict(plan.tags),
    }
    if spot:
        resources["bidPercentage"] = plan.spot_bid_percentage
    return resources


def _same(current: Mapping, wanted: Mapping) -> bool:
    keys = ("minvCpus", "maxvCpus", "instanceTypes", "subnets", "securityGroupIds", "type")
    return all(sorted(current.get(k) or []) == sorted(wanted[k]) if isinstance(wanted[k], list)
               else current.get(k) == wanted[k] for k in keys)


def ensure(batch, plan: SitePlan, *, wait: Callable[[float], None] = time.sleep, timeout: float = 600) -> list[str]:
    """Create or update every compute environment, queue and base job definition of the plan. What it did, a
    line per resource ("created …", "updated …", "unchanged …")."""
    done = []
    environments = {ce["computeEnvironmentName"]: ce for ce in _all(batch.describe_compute_environments,
                                                                        "computeEnvironments")}
    queues = {q["jobQueueName"]: q for q in _all(batch.describe_job_queues, "jobQueues")}
    for queue in plan.queues:
        wanted = _compute_resources(plan, queue)
        current = environments.get(queue.name)
        if current is None:
            args = {"computeEnvironmentName": queue.name, "type": "MANAGED", "state": "ENABLED",
                    "computeResources": wanted, "tags": dict(plan.tags)}
            if plan.service_role:
                args["serviceRole"] = plan.service_role
            batch.create_compute_environment(**args)
            done.append(f"created compute environment {queue.name} ({queue.instance_type}, {queue.market}, 0-{queue.max_vcpus} vCPUs)")
        elif not _same(current.get("computeResources") or {}, wanted) or current.get("state") != "ENABLED":
            batch.update_compute_environment(computeEnvironment=queue.name, state="ENABLED", computeResources={
                "minvCpus": 0, "maxvCpus": queue.max_vcpus, "subnets": wanted["subnets"],
                "securityGroupIds": wanted["securityGroupIds"]})
            done.append(f"updated compute environment {queue.name}")
        else:
            done.append(f"unchanged compute environment {queue.name}")
        _wait_for(lambda name=queue.name: _valid(batch.describe_compute_environments(computeEnvironments=[name]),
                                                  "computeEnvironments"), wait, timeout, f"compute environment {queue.name}")
        order = [{"order": 1, "computeEnvironment": queue.name}]
        existing = queues.get(queue.name)
        if existing is None:
            batch.create_job_queue(jobQueueName=queue.name, state="ENABLED", priority=1, computeEnvironmentOrder=order,
                                   tags=dict(plan.tags))
            done.append(f"created job queue {queue.name}")
        elif existing.get("state") != "ENABLED" or [o["computeEnvironment"].rsplit("/", 1)[-1] for o in
                                                   existing.get("computeEnvironmentOrder", [])] != [queue.name]:
            batch.update_job_queue(jobQueue=queue.name, state="ENABLED", computeEnvironmentOrder=order)
            done.append(f"updated job queue {queue.name}")
        else:
            done.append(f"unchanged job queue {queue.name}")
        done.append(_ensure_definition(batch, plan, queue))
    return done


def _ensure_definition(batch, plan: SitePlan, queue: QueuePlan) -> str:
    """The family's base revision (a job submitted by hand to check the queue); a new one only if it changed."""
    container = {"image": plan.image, "command": list(plan.command),
                 "resourceRequirements": [{"type": "VCPU", "value": "1"}, {"type": "MEMORY", "value": "2048"}]}
    active = [d for d in _all(batch.describe_job_definitions, "jobDefinitions", jobDefinitionName=queue.name,
                              status="ACTIVE")]
    if any(d.get("containerProperties", {}).get("image") == plan.image and
           d.get("containerProperties", {}).get("command") == list(plan.command) and
           d.get("tags", {}).get(f"{TAG_PREFIX}base") == "1" for d in active):
        return f"unchanged job definition {queue.name}"
    batch.register_job_definition(jobDefinitionName=queue.name, type="container", containerProperties=container,
                                  tags={**plan.tags, f"{TAG_PREFIX}base": "1"}, propagateTags=True,
                                  platformCapabilities=["EC2"])
    return f"registered job definition {queue.name}"


def teardown(batch, prefix: str, *, wait: Callable[[float], None] = time.sleep, timeout: float = 600) -> list[str]:
    """Disable and delete every queue and compute environment named after the cluster, and deregister its job
    definitions. Jobs still in a queue are terminated by AWS when it is deleted."""
    done = []
    mine = prefix + "-"
    for queue in [q for q in _all(batch.describe_job_queues, "jobQueues") if q["jobQueueName"].startswith(mine)]:
        name = queue["jobQueueName"]
        if queue.get("state") != "DISABLED":
            batch.update_job_queue(jobQueue=name, state="DISABLED")
        _wait_for(lambda n=name: _valid(batch.describe_job_queues(jobQueues=[n]), "jobQueues"), wait, timeout, f"job queue {name}")
        batch.delete_job_queue(jobQueue=name)
        _wait_for(lambda n=name: not batch.describe_job_queues(jobQueues=[n]).get("jobQueues"), wait, timeout,
                  f"job queue {name} to go")
        done.append(f"deleted job queue {name}")
    for env in [e for e in _all(batch.describe_compute_environments, "computeEnvironments")
                if e["computeEnvironmentName"].startswith(mine)]:
        name = env["computeEnvironmentName"]
        if env.get("state") != "DISABLED":
            batch.update_compute_environment(computeEnvironment=name, state="DISABLED")
        _wait_for(lambda n=name: _valid(batch.describe_compute_environments(computeEnvironments=[n]), "computeEnvironments"),
                  wait, timeout, f"compute environment {name}")
        batch.delete_compute_environment(computeEnvironment=name)
        done.append(f"deleted compute environment {name}")
    for definition in _all(batch.describe_job_definitions, "jobDefinitions", status="ACTIVE"):
        if definition["jobDefinitionName"].startswith(mine):
            batch.deregister_job_definition(jobDefinition=definition["jobDefinitionArn"])
            done.append(f"deregistered job definition {definition['jobDefinitionName']}:{definition['revision']}")
    return done


def _all(method, key: str, **kwargs) -> list[dict]:
    items, token = [], None
    while True:
        page = method(**kwargs, **({"nextToken": token} if token else {}))
        items += page.get(key, [])
        token = page.get("nextToken")
        if not token:
            return items


def _valid(page: Mapping, key: str) -> bool:
    items = page.get(key) or []
    return all(item.get("status") in (None, "VALID") for item in items)


def _wait_for(condition: Callable[[], bool], wait: Callable[[float], None], timeout: float, what: str) -> None:
    waited = 0.0
    while not condition():
        if waited >= timeout:
            raise BackendError(f"AWS Batch: gave up waiting for {what} after {timeout:.0f} s")
        wait(5.0)
        waited += 5.0
