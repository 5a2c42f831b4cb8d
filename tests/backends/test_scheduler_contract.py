"""What every scheduler backend must do, checked against the real daemons of the loopback test cluster.

Each scheduler contributes a `Profile`: how to reach it, what a multi-GPU request and an impossible one look
like there. The tests are the same for all of them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime

import pytest

from backends.base import Backend, JobSpec, Resources, State, SubmitRefused
from tests.backends.conftest import wait_state
from tests.conftest import QUEUE_WAIT

pytestmark = pytest.mark.cluster


@dataclass
class Profile:
    name: str
    login: str  # key of conftest.PORTS
    make: Callable[..., Backend]  # (transport) -> backend
    gpu_request: dict  # make_spec kwargs for an accepted multi-GPU job
    gpu_check: str  # shell that prints evidence of the GPU allocation
    gpu_evidence: str  # expected in stdout
    impossible: dict  # make_spec kwargs for a request the scheduler must refuse
    refusal: str  # words of the scheduler's own refusal
    hold_directive: str  # a directive line that keeps a job pending (user hold)
    group: str = "kkdemo"
    timeout_walltime: int = 5  # seconds asked for in the walltime test
    timeout_wait: float = 60


def _slurm(transport):
    from backends.slurm import SlurmBackend

    return SlurmBackend(transport, {})


def _torque(transport):
    from backends.pbs import PBSBackend

    return PBSBackend(transport, {"dialect": "torque"})


def _sge(profile: str):
    def make(transport):
        from backends.sge import SGEBackend

        return SGEBackend(transport, {"site_profile": profile})

    return make


# In a Grid Engine job the request is visible to the job itself: print the resource list the scheduler holds.
SGE_REQUEST = 'echo "request=$(qstat -j "$JOB_ID" | grep -E "^(hard resource_list|project|parallel environment)" | tr -s " " | tr "\\n" ";")"'

PROFILES = [
    Profile(
        name="slurm",
        login="slurm",
        make=_slurm,
        gpu_request={"gpus": 8, "gpu_type": "a100", "mapping": {"partition": "gpu", "gres": "gpu:a100:8"}},
        gpu_check='echo "visible=$CUDA_VISIBLE_DEVICES"',
        gpu_evidence="visible=0,1,2,3,4,5,6,7",
        impossible={"gpus": 9, "gpu_type": "a100", "mapping": {"partition": "gpu", "gres": "gpu:a100:9"}},
        refusal="Requested node configuration is not available",
        hold_directive="#SBATCH --hold",
        # Slurm counts time limits in whole minutes and checks them about every 30 s.
        timeout_walltime=60,
        timeout_wait=150,
    ),
    Profile(
        name="pbs-torque",
        login="pbs",
        make=_torque,
        # The Torque dialect's GPU request, as the test cluster's wrappers understand it (see backends/torque.py).
        gpu_request={"gpus": 8, "gpu_type": "a100", "mapping": {}},
        gpu_check='echo "visible=$CUDA_VISIBLE_DEVICES"',
        gpu_evidence="visible=0,1,2,3,4,5,6,7",
        impossible={"gpus": 9, "gpu_type": "a100", "mapping": {}},
        refusal="Requested node configuration is not available",
        hold_directive="#PBS -h",
        timeout_walltime=60,
        timeout_wait=150,
    ),
    Profile(
        name="sge-tsubame",
        login="sge-site",
        make=_sge("tsubame"),
        gpu_request={"nodes": 2, "gpus": 4, "gpu_type": "h100", "mapping": {"resource": "f_node"}},
        gpu_check=SGE_REQUEST,
        gpu_evidence="f_node=2",
        impossible={"nodes": 99, "gpus": 4, "gpu_type": "h100", "mapping": {"resource": "f_node"}},
        refusal="no suitable queues",
        hold_directive="#$ -h",
    ),
    Profile(
        name="sge-abci",
        login="sge-site",
        make=_sge("abci"),
        gpu_request={"nodes": 2, "gpus": 8, "gpu_type": "a100", "mapping": {"resource": "rt_AF"}},
        gpu_check=SGE_REQUEST,
        gpu_evidence="rt_AF=2",
        impossible={"nodes": 99, "gpus": 8, "gpu_type": "a100", "mapping": {"resource": "rt_AF"}},
        refusal="no suitable queues",
        hold_directive="#$ -h",
    ),
    Profile(
        name="sge",
        login="sge",
        make=_sge("generic"),
        gpu_request={"gpus": 8, "gpu_type": "a100", "mapping": {"pe": "smp", "gpu_resource": "gpu"}},
        gpu_check=SGE_REQUEST,
        gpu_evidence="gpu=8",
        impossible={"gpus": 9, "gpu_type": "a100", "mapping": {"pe": "smp", "gpu_resource": "gpu"}},
        refusal="no suitable queues",
        hold_directive="#$ -h",
    ),
]


@pytest.fixture(params=PROFILES, ids=lambda p: p.name)
def profile(request) -> Profile:
    return request.param


def _final(record) -> bool:
    return record.state.is_final


@pytest.fixture(scope="module", autouse=True)
def walltime_jobs(transport_for, run_id) -> dict[str, str]:
    """The walltime test's jobs, one per scheduler, submitted as the module starts and checked at its end.

    Slurm (and the Torque wrappers on it) count limits in whole minutes and check them about every 30 s: waiting
    for each scheduler's job in turn cost three minutes; these run out side by side while the other checks run."""
    jobs = {}
    for profile in PROFILES:
        name = f"kh-{run_id}-walltime-{profile.name}"
        spec = JobSpec(name=name, payload="sleep 600\n", walltime_seconds=profile.timeout_walltime,
                       resources=Resources(nodes=1, cpus_per_node=1), workdir=f"kakehashi-tests/{run_id}/{name}",
                       group=profile.group)
        jobs[profile.name] = profile.make(transport_for(profile.login, "alice")).submit(spec)
    return jobs


def test_a_job_is_seen_queued_or_running_then_completes_with_exit_0(profile, backend, make_spec):
    spec = make_spec("echo hello-$(id -un)\nsleep 3\n", group=profile.group)
    job_id = backend.submit(spec)
    seen = wait_state(backend, job_id, lambda s: s.state in {State.PENDING, State.RUNNING}, timeout=30, interval=0.2)
    assert seen.state in {State.PENDING, State.RUNNING}
    record = wait_state(backend, job_id, _final)
    assert (record.state, record.exit_code) == (State.COMPLETED, 0)
    assert record.started_at and record.ended_at and record.ended_at >= record.started_at
    assert "hello-alice" in backend.read_output(spec.workdir, "stdout").decode()


def test_a_job_that_exits_3_fails_with_exit_code_3(profile, backend, make_spec):
    spec = make_spec("echo oops >&2\nexit 3\n", group=profile.group)
    job_id = backend.submit(spec)
    record = wait_state(backend, job_id, _final)
    assert (record.state, record.exit_code) == (State.FAILED, 3)
    assert backend.read_output(spec.workdir, "stderr").decode().strip().endswith("oops")


def test_cancelling_a_running_job(profile, backend, make_spec):
    spec = make_spec("echo started\nsleep 300\n", group=profile.group)
    job_id = backend.submit(spec)
    wait_state(backend, job_id, lambda s: s.state == State.RUNNING, timeout=QUEUE_WAIT + 60, interval=0.3)
    backend.cancel(job_id)
    record = wait_state(backend, job_id, _final)
    assert record.state in {State.CANCELLED, State.FAILED}  # the portal knows it asked: see finish_job
    assert record.state == State.CANCELLED or record.exit_code not in (0, None)


def test_cancelling_a_pending_job(profile, backend, make_spec):
    spec = make_spec("echo never\n", group=profile.group)
    # A held job stays pending whatever the cluster's load: add the scheduler's own hold directive.
    script = backend.render(spec).replace("\n", f"\n{profile.hold_directive}\n", 1)
    job_id = backend.submit(spec, script=script)
    status = wait_state(backend, job_id, lambda s: s.state is not None, timeout=30, interval=0.2)
    assert status.state == State.PENDING
    backend.cancel(job_id)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        current = backend.statuses([job_id]).get(job_id)
        if current is None or current.state.is_final:
            break
        time.sleep(0.3)
    else:
        raise AssertionError("the cancelled job is still queued")
    record = backend.final_records([job_id]).get(job_id)
    # Some schedulers keep no accounting for a job that never started (SGE): then there is none at all.
    assert record is None or record.state == State.CANCELLED
    assert "never" not in backend.read_output(spec.workdir, "stdout").decode()


def test_a_multi_gpu_request_is_accepted_and_gets_its_gpus(profile, backend, make_spec):
    spec = make_spec(profile.gpu_check + "\n", group=profile.group, **profile.gpu_request)
    job_id = backend.submit(spec)
    record = wait_state(backend, job_id, _final)
    assert record.state == State.COMPLETED, record
    assert profile.gpu_evidence in backend.read_output(spec.workdir, "stdout").decode()


def test_an_impossible_request_is_refused_with_the_schedulers_own_message(profile, backend, make_spec):
    spec = make_spec("echo never\n", group=profile.group, **profile.impossible)
    with pytest.raises(SubmitRefused) as refused:
        backend.submit(spec)
    assert profile.refusal in str(refused.value)


def _without_the_row(records: dict) -> dict:
    """Records without the scheduler's row as read (`raw`, which nothing of the portal reads): slurmdbd can record a
    job that started and ended within a second before it has the job's own record, and says JobName 'allocation' and
    Partition '' until it does (seen in full runs and reproduced here: a second later the name and 'gpu')."""
    return {job_id: replace(record, raw={}) for job_id, record in records.items()}


def test_many_jobs_are_tracked_with_one_status_call(profile, backend, make_spec):
    submitted = datetime.now(UTC)
    ids = [backend.submit(make_spec(f"echo job-{i}\n", group=profile.group)) for i in range(6)]
    backend.transport.commands.clear()
    statuses = backend.statuses(ids)
    assert len(backend.transport.commands) == 1
    assert set(statuses) <= set(ids) and len(statuses) >= 1
    for job_id in ids:
        wait_state(backend, job_id, _final)
    backend.transport.commands.clear()
    records = backend.final_records(ids)
    assert len(backend.transport.commands) == 1
    assert {r.state for r in records.values()} == {State.COMPLETED} and set(records) == set(ids)
    # Told when they were submitted (as tracking tells it), the answer is the same, still from one command; on
    # Grid Engine that command reads the accounting file once for all six instead of once each.
    backend.transport.commands.clear()
    assert _without_the_row(backend.final_records(ids, submitted_since=submitted)) == _without_the_row(records)
    (command,) = backend.transport.commands
    if backend.kind == "sge":
        assert command.count("qacct") == 1 and "for id in" not in command, command


def test_a_lost_reply_is_found_again_instead_of_submitted_twice(profile, backend, make_spec):
    spec = make_spec("echo once\n", group=profile.group)
    job_id = backend.submit(spec)
    # A worker killed after the submit but before recording the id retries with the same spec.
    assert backend.find(spec) == job_id
    other = make_spec("echo other\n", group=profile.group)
    assert backend.find(other) is None


def test_the_job_runs_as_the_researchers_own_account(profile, transport_for, make_spec):
    for user in ("alice", "bob"):
        backend = profile.make(transport_for(profile.login, user))
        spec = make_spec('echo "whoami=$(id -un)"\n', group=profile.group)
        record = wait_state(backend, backend.submit(spec), _final)
        assert record.state == State.COMPLETED
        assert f"whoami={user}\n" in backend.read_output(spec.workdir, "stdout").decode()


def test_modules_are_loaded_and_the_job_says_what_ran_where(profile, backend, make_spec):
    spec = make_spec('echo "cuda_home=$CUDA_HOME"\n', group=profile.group, modules=["cuda/12.4"])
    job_id = backend.submit(spec)
    record = wait_state(backend, job_id, _final)
    out = backend.read_output(spec.workdir, "stdout").decode()
    assert record.state == State.COMPLETED, out
    assert "cuda_home=" in out and "cuda_home=\n" not in out
    assert "modules: cuda/12.4" in out
    for line in ("== Kakehashi job", "date:", "hosts:", "workdir:"):
        assert line in out


def test_walltime_exceeded_ends_timed_out(profile, backend, walltime_jobs):
    # Submitted with `sleep 600` and the profile's short walltime when the module started (see walltime_jobs).
    record = wait_state(backend, walltime_jobs[profile.name], _final, timeout=profile.timeout_wait, interval=1)
    assert record.state == State.TIMED_OUT
