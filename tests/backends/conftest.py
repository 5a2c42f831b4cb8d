"""Connections to the loopback test cluster (tests/cluster): real sshd, real schedulers, real users."""

from __future__ import annotations

import re
import time
import uuid

import pytest

from backends.base import JobSpec, Resources
from backends.transport import CommandResult, Transport
from tests.conftest import PORTS, QUEUE_WAIT  # noqa: F401 - PORTS re-exported for the backend tests


class CountingTransport(Transport):
    """Wraps a transport and records every command, to show how many scheduler calls a cycle makes."""

    def __init__(self, inner: Transport) -> None:
        self.inner = inner
        self.commands: list[str] = []

    def run_shell(self, command: str, *, stdin: bytes | None = None, timeout: float | None = None) -> CommandResult:
        self.commands.append(command)
        return self.inner.run_shell(command, stdin=stdin, timeout=timeout)

    def read_file(self, path: str, *, offset: int = 0, limit: int = 1 << 20) -> bytes:
        return self.inner.read_file(path, offset=offset, limit=limit)


@pytest.fixture
def backend(profile, transport_for):
    """The backend of the module's `profile` (a scheduler contract parameter), as alice, counting its commands."""
    return profile.make(CountingTransport(transport_for(profile.login, "alice")))


@pytest.fixture(scope="session")
def run_id() -> str:
    return uuid.uuid4().hex[:8]


@pytest.fixture
def make_spec(run_id, request):
    counter = iter(range(1000))

    def make(payload: str, *, walltime: int = 120, nodes: int = 1, gpus: int = 0, gpu_type: str = "",
             mapping: dict | None = None, group: str = "", modules=(), env=None, **kwargs) -> JobSpec:
        base = request.node.name.split("[")[0].replace("test_", "")[:24].strip("_").replace("_", "-")
        # The parameter too: two profiles of one login node (TSUBAME and ABCI) must not share a job directory.
        param = re.sub(r"[^A-Za-z0-9-]", "-", getattr(request.node, "callspec", None) and request.node.callspec.id or "")
        name = f"kh-{run_id}-{base}-{param[:20]}-{next(counter)}" if param else f"kh-{run_id}-{base}-{next(counter)}"
        return JobSpec(
            name=name,
            payload=payload,
            walltime_seconds=walltime,
            resources=Resources(nodes=nodes, gpus_per_node=gpus, gpu_type=gpu_type, cpus_per_node=1, mapping=mapping or {}),
            workdir=f"kakehashi-tests/{run_id}/{name}",
            group=group,
            modules=tuple(modules),
            env=env or {},
            **kwargs,
        )

    return make


def wait_state(backend, job_id: str, done, timeout: float = QUEUE_WAIT + 90, interval: float = 0.5):
    """Poll statuses()/final_records() until `done(status_or_record)`; return what satisfied it (by default as long
    as a job may queue behind another test's on the shared cluster, and run)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        status = backend.statuses([job_id]).get(job_id)
        record = None
        if status is None or status.state.is_final:
            record = backend.final_records([job_id]).get(job_id)
        last = record or status
        if last is not None and done(last):
            return last
        time.sleep(interval)
    raise AssertionError(f"job {job_id}: timed out; last seen {last!r}")
