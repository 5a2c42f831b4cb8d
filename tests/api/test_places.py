"""The one comparison before Run through the API: GET places/ and a dry run's places, on the real test cluster."""

from __future__ import annotations

from decimal import Decimal

import pytest

from tests.api.conftest import job_body

pytestmark = [pytest.mark.cluster, pytest.mark.django_db]


@pytest.fixture
def checked_site(hpc_site):
    """The test clusters registered, points convertible to yen, and each cluster's health collected as the beat
    does it (over SSH as a linked researcher)."""
    from portal.budgets.models import UnitConversion
    from portal.clusters.health import collect_all

    UnitConversion.objects.create(from_unit="points", to_unit="JPY", factor=Decimal("10"))
    collect_all()
    return hpc_site


def test_8_gpus_for_2_hours_lists_every_place_that_can_hold_them_cheapest_first_with_how_busy_it_is(checked_site, alice_api):
    answer = alice_api.get("/api/v1/places/", {"project": "vision", "gpus": "a100:8", "hours": "2"})
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert body["shape"] == "8×A100, 2 h"
    rows = [(p["hardware"], p["nodes"], p["cost"]["amount"], p["reporting_cost"]["amount"]) for p in body["places"]]
    assert rows == [
        ("tsubame-f-node", 2, "4.0000", "40.0000"),  # two 4-GPU f_nodes: the cheapest
        ("abci-rt-af", 1, "6.0000", "60.0000"),
        ("pbs-a100x8", 1, "6.0000", "60.0000"),
        ("slurm-a100x8", 1, "6.0000", "60.0000"),
        ("sge-gpu", 1, "8.0000", "80.0000"),
    ]
    by_slug = {p["hardware"]: p for p in body["places"]}
    assert by_slug["tsubame-f-node"]["same_model"] is False and by_slug["slurm-a100x8"]["same_model"] is True
    slurm = by_slug["slurm-a100x8"]
    assert slurm["reachable"] is True and slurm["total_nodes"] == 2 and slurm["checked_at"]
    assert "nodes free" in slurm["busy"] and slurm["cost"]["unit"] == "points" and slurm["reporting_cost"]["unit"] == "JPY"
    # A local CPU node holds no GPUs; one GPU slices are too small to make 8 within their node limits.
    assert "local-cpu" not in by_slug and "slurm-a100x1" not in by_slug and "tsubame-s-gpu" not in by_slug


def test_a_dry_run_carries_the_same_comparison_for_the_shape_it_describes(checked_site, alice_api):
    answer = alice_api.post("/api/v1/jobs/", job_body(hardware="slurm-a100x8", walltime="2h", software="cuda-12-4",
                                                       dry_run=True))
    assert answer.status_code == 200, answer.content
    assert [p["hardware"] for p in answer.json()["places"]][:1] == ["tsubame-f-node"]
    real = alice_api.post("/api/v1/jobs/", job_body(walltime="00:01:00"))
    assert real.status_code == 201 and real.json()["places"] is None


def test_a_cluster_that_does_not_answer_is_shown_as_such_with_its_error_and_keeps_its_last_figures(checked_site, alice_api):
    from portal.clusters.health import collect

    slurm = checked_site.clusters["slurm-test"]
    slurm.login_port = 1  # nothing listens there
    slurm.save()
    health = collect(slurm)
    assert health.reachable is False and health.last_error and health.total_nodes == 2
    places = alice_api.get("/api/v1/places/", {"project": "vision", "gpus": "8", "hours": "2"}).json()["places"]
    row = next(p for p in places if p["hardware"] == "slurm-a100x8")
    assert row["reachable"] is False and row["busy"].startswith("not answering since")


def test_places_of_another_project_are_not_found_and_bad_shapes_are_explained(checked_site, alice_api, mallory_api):
    assert mallory_api.get("/api/v1/places/", {"project": "vision", "gpus": "8"}).status_code == 404
    for params, field in (({"gpus": "8"}, "project"), ({"project": "vision", "gpus": "eight"}, "gpus"),
                          ({"project": "vision", "gpus": "8", "hours": "-1"}, "hours"),
                          ({"project": "vision", "gpus": "8", "walltime": "soon"}, "walltime"),
                          ({"project": "vision", "gpus": "$(id):8"}, "gpus")):
        answer = alice_api.get("/api/v1/places/", params)
        assert answer.status_code == 400 and answer.json()["field"] == field, (params, answer.content)


def test_the_clusters_endpoint_carries_each_clusters_last_health_check(checked_site, alice_api, mallory_api):
    clusters = {c["slug"]: c for c in alice_api.get("/api/v1/clusters/").json()["results"]}
    slurm = clusters["slurm-test"]["health"]
    assert slurm["reachable"] is True and slurm["total_nodes"] == 2 and slurm["pending"] is not None
    assert [c["slug"] for c in mallory_api.get("/api/v1/clusters/").json()["results"]] == ["local"]
