"""What a caller can see: projects with roles, clusters, hardware, software, budgets — only their own."""

from __future__ import annotations

from decimal import Decimal

import pytest

from portal.budgets.models import Budget, UnitConversion
from portal.catalog.models import HardwareType, Software
from portal.clusters.models import Allocation, Cluster, Kind
from portal.projects.models import Membership, Role

pytestmark = pytest.mark.django_db


@pytest.fixture
def gpu_site(local_site):
    """A GPU cluster for project "vision" only, with two A100 offers at different prices and an H100 one."""
    gpu = Cluster.objects.create(slug="gpu-hpc", name="GPU HPC", kind=Kind.SLURM)
    Allocation.objects.create(project=local_site.project, cluster=gpu, group="kk01")
    make = HardwareType.objects.create
    make(cluster=gpu, slug="a100-dear", name="A100 dear", gpu_model="a100", gpus_per_node=8, max_nodes=4,
         rate=Decimal("30"), rate_unit="points", measured={"tflops": 250})
    make(cluster=gpu, slug="a100-cheap", name="A100 cheap", gpu_model="A100", gpus_per_node=8, max_nodes=2,
         rate=Decimal("1"), rate_unit="USD")
    make(cluster=gpu, slug="h100", name="H100", gpu_model="h100", gpus_per_node=4, max_nodes=2, rate=Decimal("50"))
    make(cluster=gpu, slug="retired", name="Retired", gpu_model="v100", gpus_per_node=4, enabled=False)
    UnitConversion.objects.create(from_unit="USD", to_unit="points", factor=Decimal("20"))
    Software.objects.create(slug="pytorch", name="PyTorch", kind="container", image="docker://pytorch").clusters.add(gpu)
    secret = Software.objects.create(slug="nlp-only", name="NLP tools", kind="modules", modules=["nlp/1"])
    secret.clusters.add(local_site.cluster)
    secret.projects.add(local_site.other)
    local_site.gpu = gpu
    return local_site


def test_me(alice_api):
    me = alice_api.get("/api/v1/me/").json()
    assert me["username"] == "alice" and me["is_staff"] is False and me["token"]["scopes"] == ["read", "submit"]


def test_projects_are_those_you_are_in_with_your_role(alice_api, mallory_api, local_site, make_user, api_as):
    listing = alice_api.get("/api/v1/projects/").json()
    assert listing["count"] == 1
    assert listing["results"][0] == {"slug": "vision", "name": "Vision lab", "description": "", "role": "owner",
                                     "max_walltime_hours": None}
    assert [p["slug"] for p in mallory_api.get("/api/v1/projects/").json()["results"]] == ["nlp"]
    viewer = make_user("victor")
    Membership.objects.create(user=viewer, project=local_site.project, role=Role.VIEWER)
    assert api_as(viewer, "read").get("/api/v1/projects/vision/").json()["role"] == "viewer"
    assert mallory_api.get("/api/v1/projects/vision/").status_code == 404


def test_clusters_are_those_of_your_projects(alice_api, mallory_api, gpu_site):
    assert [c["slug"] for c in alice_api.get("/api/v1/clusters/").json()["results"]] == ["gpu-hpc", "local"]
    assert [c["slug"] for c in mallory_api.get("/api/v1/clusters/").json()["results"]] == ["local"]


def test_hardware_lists_what_your_projects_may_use_with_its_details(alice_api, mallory_api, gpu_site):
    hardware = {h["slug"]: h for h in alice_api.get("/api/v1/hardware/").json()["results"]}
    assert set(hardware) == {"local-cpu", "a100-dear", "a100-cheap", "h100"}  # not the disabled one
    dear = hardware["a100-dear"]
    assert dear["cluster"] == "gpu-hpc" and dear["gpu_model"] == "a100" and dear["gpus_per_node"] == 8
    assert dear["rate"] == "30.0000" and dear["rate_unit"] == "points" and dear["max_nodes"] == 4
    assert dear["max_walltime_hours"] == 24 and dear["measured"] == {"tflops": 250}
    assert [h["slug"] for h in mallory_api.get("/api/v1/hardware/").json()["results"]] == ["local-cpu"]


def test_hardware_of_a_project_is_priced_in_its_budget_unit_cheapest_first(alice_api, gpu_site):
    answer = alice_api.get("/api/v1/hardware/", {"project": "vision", "gpu_model": "a100", "gpus_per_node": 8}).json()
    assert [h["slug"] for h in answer["results"]] == ["a100-cheap", "a100-dear"]  # 20 points (1 USD) before 30
    assert answer["results"][0]["price_per_node_hour"] == {"amount": "20.0000", "unit": "points", "text": "20.00 points"}
    assert alice_api.get("/api/v1/hardware/", {"project": "nlp"}).status_code == 404
    bad = alice_api.get("/api/v1/hardware/", {"gpus_per_node": "eight"})
    assert bad.status_code == 400 and bad.json()["field"] == "gpus_per_node"


def test_software_is_what_your_projects_may_use(alice_api, mallory_api, gpu_site):
    software = alice_api.get("/api/v1/software/").json()["results"]
    assert [s["slug"] for s in software] == ["pytorch"] and software[0]["clusters"] == ["gpu-hpc"]
    assert [s["slug"] for s in mallory_api.get("/api/v1/software/").json()["results"]] == ["nlp-only"]
    assert alice_api.get("/api/v1/software/", {"project": "vision"}).json()["count"] == 1


def test_a_projects_budget(alice_api, local_site):
    budget = alice_api.get("/api/v1/projects/vision/budget/").json()
    assert budget == {
        "project": "vision", "budget": "100.0000", "reserved": "0.0000", "spent": "0.0000", "available": "100.0000",
        "unit": "points", "period": "once", "period_start": budget["period_start"], "strict": True, "used_percent": 0.0,
        "text": {"budget": "100.00", "reserved": "0.00", "spent": "0.00", "available": "100.00"},
    }
    alice_api.post("/api/v1/jobs/", {"project": "vision", "name": "x", "hardware": "local-cpu", "walltime": "1h",
                                     "script": "true"})
    after = alice_api.get("/api/v1/projects/vision/budget/").json()
    assert after["reserved"] == "10.0000" and after["available"] == "90.0000" and after["used_percent"] == 10.0


def test_a_project_without_a_budget_answers_budget_null(mallory_api, local_site):
    assert not Budget.objects.filter(project=local_site.other).exists()
    budget = mallory_api.get("/api/v1/projects/nlp/budget/")
    assert budget.status_code == 200 and budget.json()["budget"] is None and budget.json()["project"] == "nlp"


def test_another_projects_budget_is_not_found(mallory_api, local_site):
    response = mallory_api.get("/api/v1/projects/vision/budget/")
    assert response.status_code == 404 and "vision" in response.json()["detail"]


def test_staff_see_every_project(local_site, make_user, api_as):
    staff = api_as(make_user("root", staff=True), "read")
    assert {p["slug"] for p in staff.get("/api/v1/projects/").json()["results"]} == {"vision", "nlp"}
