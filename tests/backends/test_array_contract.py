"""Sweeps as one scheduler array, on every backend that says it can (`supports_arrays`), against real daemons.

One submit makes N elements; each element is then a job of its own to the backend: its own id, state, exit
code, stdout in its own directory and cancel.
"""

from __future__ import annotations

import time

import pytest

from backends.base import ArrayElement, Backend, State, element_dir
from tests.backends.test_scheduler_contract import PROFILES, Profile

pytestmark = pytest.mark.cluster

ARRAY_PROFILES = [p for p in PROFILES if p.make(None).supports_arrays]


def test_slurm_and_grid_engine_submit_sweeps_as_arrays_and_pbs_does_not():
    assert {p.name for p in ARRAY_PROFILES} == {"slurm", "sge-tsubame", "sge-abci", "sge"}


@pytest.fixture(params=ARRAY_PROFILES, ids=lambda p: p.name)
def profile(request) -> Profile:
    return request.param


def _elements(*values: str) -> tuple[ArrayElement, ...]:
    return tuple(
        ArrayElement(i, env={"LR": value}, files={"params.txt": f"lr={value}\n".encode()})
        for i, value in enumerate(values, 1)
    )


def _wait_all(backend: Backend, ids: list[str], timeout: float = 120) -> dict:
    """Poll as the tracker does (one statuses call for all, accounting for those gone) until all are final."""
    deadline = time.monotonic() + timeout
    records: dict = {}
    while time.monotonic() < deadline:
        open_ids = [i for i in ids if i not in records]
        statuses = backend.statuses(open_ids)
        gone = [i for i in open_ids if i not in statuses or statuses[i].state.is_final]
        if gone:
            records |= backend.final_records(gone)
        if len(records) == len(ids):
            return records
        time.sleep(0.5)
    raise AssertionError(f"elements did not all end: have {sorted(records)}, statuses {backend.statuses(ids)}")


def test_each_element_of_an_array_runs_with_its_own_parameters_and_reports_its_own_exit(backend, make_spec):
    payload = 'echo "lr=$LR index=$KAKEHASHI_ARRAY_INDEX"; cat params.txt; echo out > "$KAKEHASHI_OUTPUT_DIR/o.txt"\n' \
              '[ "$LR" = "0.2" ] && exit 3; exit 0\n'
    spec = make_spec(payload, array=_elements("0.1", "0.2", "0.3"))
    array_id = backend.submit(spec)
    ids = [backend.element_id(array_id, i) for i in (1, 2, 3)]
    assert len(set(ids)) == 3

    records = _wait_all(backend, ids)

    assert [records[i].state for i in ids] == [State.COMPLETED, State.FAILED, State.COMPLETED]
    assert [records[i].exit_code for i in ids] == [0, 3, 0]
    for index, value in ((1, "0.1"), (2, "0.2"), (3, "0.3")):
        directory = element_dir(spec.workdir, index)
        stdout = backend.read_output(directory, "stdout").decode()
        assert f"lr={value} index={index}" in stdout
        assert stdout.count(f"lr={value}") == 2  # the env variable and the element's own file
        assert backend.transport.read_file(f"{directory}/outputs/o.txt") == b"out\n"


# Holding and releasing a whole array, as its owner, with the scheduler's own commands.
HOLD = {"slurm": ("scontrol hold {}", "scontrol release {}"), "sge": ("qhold {}", "qrls {}")}


def test_tracking_an_array_reports_every_element_even_while_waiting_with_one_status_call(backend, make_spec):
    spec = make_spec("sleep 1", array=_elements(*[str(i) for i in range(5)]))
    array_id = backend.submit(spec)
    hold, release = HOLD[backend.kind]
    assert backend.transport.run_shell(hold.format(array_id)).ok
    ids = [backend.element_id(array_id, i) for i in range(1, 6)]
    before = len(backend.transport.commands)
    statuses = backend.statuses(ids)
    assert len(backend.transport.commands) == before + 1
    # Schedulers list waiting elements together ("123_[2-5]", "2-5:1"); each is still reported as itself. (Grid
    # Engine may have started them all before the hold; Slurm, scheduling every 2 s here, has not.)
    assert set(statuses) == set(ids), statuses
    assert backend.transport.run_shell(release.format(array_id)).ok
    records = _wait_all(backend, ids)
    assert {records[i].state for i in ids} == {State.COMPLETED}


def test_cancelling_one_element_leaves_the_others_running_to_the_end(backend, make_spec):
    payload = 'if [ "$LR" = "stop" ]; then sleep 300; fi; echo done\n'
    spec = make_spec(payload, array=_elements("go", "stop", "go"))
    array_id = backend.submit(spec)
    ids = [backend.element_id(array_id, i) for i in (1, 2, 3)]
    deadline = time.monotonic() + 60
    while backend.statuses([ids[1]]).get(ids[1], None) is None or backend.statuses([ids[1]])[ids[1]].state != State.RUNNING:
        assert time.monotonic() < deadline, f"element 2 never ran: {backend.statuses(ids)}"
        time.sleep(0.5)

    backend.cancel(ids[1])

    records = _wait_all(backend, ids)
    assert records[ids[0]].state == State.COMPLETED and records[ids[2]].state == State.COMPLETED
    assert records[ids[1]].state == State.CANCELLED


def test_a_lost_submit_reply_finds_the_array_again(backend, make_spec):
    spec = make_spec("true", array=_elements("a", "b"))
    array_id = backend.submit(spec)
    assert backend.find(spec) == array_id
