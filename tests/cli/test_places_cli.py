"""`kakehashi places`: the comparison before Run from a terminal, against a live portal."""

from __future__ import annotations

from decimal import Decimal

import pytest

from portal.catalog.models import HardwareType

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def offers(local_site, no_live_worker):
    """An 8×A100 node at 30 points/node-h and a 4×A100 node at 5 (two make 8 GPUs) on the local cluster.

    The comparison prints each cluster's health: a live worker left by an earlier test would check it between two
    commands whose outputs a test compares ("not checked yet", then "not answering")."""
    HardwareType.objects.create(cluster=local_site.cluster, slug="a100x8", name="A100 ×8", gpu_model="a100",
                                gpus_per_node=8, max_nodes=1, rate=Decimal("30"), rate_unit="points")
    HardwareType.objects.create(cluster=local_site.cluster, slug="a100x4", name="A100 ×4", gpu_model="a100",
                                gpus_per_node=4, max_nodes=2, rate=Decimal("5"), rate_unit="points")


def test_places_prints_every_place_for_8_gpus_for_2_hours_cheapest_first(logged_in, offers):
    result = logged_in("places", "--project", "vision", "--gpus", "8", "--hours", "2")
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[0] == "Where 8×GPU, 2 h can run, cheapest first:"
    assert lines[1].split()[:5] == ["CLUSTER", "HARDWARE", "NODES", "COST", "REPORTED"]
    assert lines[2].split()[:5] == ["local", "a100x4", "2×4", "20.00", "points"]  # 2 nodes × 5 × 2 h
    assert lines[3].split()[:5] == ["local", "a100x8", "1×8", "60.00", "points"]
    assert "not checked yet" in lines[2]
    as_json = logged_in("--json", "places", "--project", "vision", "--gpus", "a100:8", "--walltime", "90m")
    assert [p["hardware"] for p in as_json.json()["places"]] == ["a100x4", "a100x8"]
    assert as_json.json()["shape"] == "8×A100, 1.5 h"


def test_places_of_a_project_you_are_not_in_is_refused_as_not_found(logged_in, offers):
    result = logged_in("places", "--project", "nlp", "--gpus", "8")
    assert result.code == 3 and "not found" in result.err.lower(), (result.code, result.err)


def test_a_dry_run_prints_the_same_comparison_as_places_below_the_script_and_estimate(logged_in, offers, tmp_path):
    from portal.budgets.models import UnitConversion
    from portal.jobs.models import Job

    UnitConversion.objects.create(from_unit="points", to_unit="JPY", factor=Decimal("10"))
    script = tmp_path / "train.sh"
    script.write_text("echo training\n")
    result = logged_in("submit", str(script), "--project", "vision", "--hardware", "a100x4", "--nodes", "2",
                       "--walltime", "2h", "--dry-run")
    assert result.code == 0, result.err
    assert "Estimate: 20.00 points" in result.out and Job.objects.count() == 0
    lines = result.out.splitlines()
    heading = lines.index("# Where this job's shape can run, cheapest first (change --hardware/--nodes to move it):")
    assert lines[heading + 1].split() == ["CLUSTER", "HARDWARE", "NODES", "COST", "REPORTED", "HOW", "BUSY", "NOW"]
    # The rows `kakehashi places` prints for the same shape: cost in the budget's points and in yen, how busy.
    assert lines[heading + 2].split()[:7] == ["local", "a100x4", "2×4", "20.00", "points", "200.00", "JPY"]
    assert lines[heading + 3].split()[:7] == ["local", "a100x8", "1×8", "60.00", "points", "600.00", "JPY"]
    assert "not checked yet" in lines[heading + 2] and len(lines) == heading + 4
    places = logged_in("places", "--project", "vision", "--gpus", "a100:8", "--hours", "2")
    assert places.out.splitlines()[1:] == lines[heading + 1:]


def test_a_sweeps_dry_run_prints_the_comparison_for_one_points_shape_below_the_estimate_for_all(logged_in, offers,
                                                                                               tmp_path):
    from portal.jobs.models import Job, JobGroup

    script = tmp_path / "train.sh"
    script.write_text('python train.py --lr "$LR"\n')
    result = logged_in("submit", str(script), "--project", "vision", "--hardware", "a100x4", "--nodes", "2",
                       "--walltime", "2h", "--sweep", "LR=0.1,0.01,0.001", "--dry-run")
    assert result.code == 0, result.err
    assert "3 jobs" in result.out and "estimate for all: 60.00 points" in result.out  # 3 × 2 nodes × 5 × 2 h
    assert Job.objects.count() == 0 and JobGroup.objects.count() == 0
    lines = result.out.splitlines()
    heading = lines.index("# Where each point's shape can run, cheapest first, a point's cost (change "
                          "--hardware/--nodes to move it):")
    # A point's cost, as `kakehashi places` prints it for the same shape (8×A100 for 2 h).
    assert lines[heading + 2].split()[:5] == ["local", "a100x4", "2×4", "20.00", "points"]
    assert lines[heading + 3].split()[:5] == ["local", "a100x8", "1×8", "60.00", "points"]
    places = logged_in("places", "--project", "vision", "--gpus", "a100:8", "--hours", "2")
    assert places.out.splitlines()[1:] == lines[heading + 1:]
    as_json = logged_in("--json", "submit", str(script), "--project", "vision", "--hardware", "a100x4", "--nodes", "2",
                        "--walltime", "2h", "--sweep", "LR=0.1,0.01", "--dry-run")
    assert [p["hardware"] for p in as_json.json()["places"]] == ["a100x4", "a100x8"]
