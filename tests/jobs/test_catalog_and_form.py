"""Picking software and hardware: presets, grants, the preview, advanced edits and sweeps."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.test import Client
from django.urls import reverse

from portal.catalog.models import HardwareType, Preset, Software
from portal.catalog.queries import hardware_for_project, resolve_preset, software_for_projects
from portal.clusters.models import Allocation, Cluster, Kind
from portal.jobs.actions.submit import prepare_job, submit_job
from portal.jobs.actions.sweeps import submit_sweep
from portal.jobs.actions.validation import BudgetRefused, JobRequest, SubmitError
from portal.jobs.models import Job, JobGroup
from portal.jobs.specs import build_spec
from portal.projects.models import Project

pytestmark = pytest.mark.django_db


@pytest.fixture
def gpu_clusters(local_site):
    """Two Slurm clusters with 8×A100 nodes at different prices; the project is granted both."""
    a = Cluster.objects.create(slug="alpha", name="Alpha", kind=Kind.SLURM, login_host="a", host_keys="x")
    b = Cluster.objects.create(slug="beta", name="Beta", kind=Kind.SLURM, login_host="b", host_keys="x")
    dear = HardwareType.objects.create(cluster=a, slug="alpha-a100x8", name="A100 node", gpu_model="a100",
                                       gpus_per_node=8, cpus_per_node=64, max_nodes=4, rate=Decimal("5"),
                                       scheduler_mapping={"partition": "gpu", "gres": "gpu:a100:8"})
    cheap = HardwareType.objects.create(cluster=b, slug="beta-a100x8", name="A100 node", gpu_model="a100",
                                        gpus_per_node=8, cpus_per_node=64, max_nodes=2, rate=Decimal("3"),
                                        scheduler_mapping={"partition": "gpu", "gres": "gpu:a100:8"})
    HardwareType.objects.create(cluster=b, slug="beta-h100x8", name="H100 node", gpu_model="h100", gpus_per_node=8,
                                cpus_per_node=64, max_nodes=2, rate=Decimal("9"))
    Allocation.objects.create(project=local_site.project, cluster=a, group="grp")
    Allocation.objects.create(project=local_site.project, cluster=b, group="grp")
    return dear, cheap


def test_run_on_8_a100_picks_the_cheapest_matching_hardware_and_lists_the_others(local_site, gpu_clusters):
    dear, cheap = gpu_clusters
    preset = Preset.objects.create(slug="8x-a100-t", label="Run on 8×A100", gpu_model="a100", gpus_per_node=8, nodes=1)
    choice = resolve_preset(preset, local_site.project)
    assert choice.best == cheap and choice.options == [cheap, dear]
    two_nodes = Preset.objects.create(slug="2x8-t", label="2 nodes × 8 GPUs", gpus_per_node=8, nodes=3)
    assert resolve_preset(two_nodes, local_site.project).options == [dear]  # only alpha allows 3 nodes


def test_a_quick_choice_says_where_it_runs_and_offers_every_cluster_that_matches(client, local_site, gpu_clusters):
    from portal.catalog.defaults import ensure_default_presets

    dear, cheap = gpu_clusters
    ensure_default_presets()
    client.force_login(local_site.alice)
    html = client.get(reverse("job-presets"), {"project": local_site.project.pk}).content.decode()
    assert "on Beta · 3.00 points/node-h · cheapest of 2" in html
    # The dearer place is offered too, as a choice that fills the form with it (static/kakehashi.js, button.preset).
    assert (f'data-hardware="{dear.pk}" data-nodes="1" data-preset="8x-a100">or on Alpha (A100 node) · 5.00 '
            "points/node-h</button>") in html
    from portal.api.tokens import issue_token

    token = issue_token(local_site.alice, name="presets", scopes=["read"])[1]
    presets = Client().get("/api/v1/presets/", {"project": "vision"}, HTTP_AUTHORIZATION=f"Bearer {token}").json()
    answer = next(p for p in presets if p["slug"] == "8x-a100")
    assert answer["options"] == [cheap.slug, dear.slug] and answer["clusters"] == ["beta", "alpha"]


def test_a_project_sees_only_the_hardware_and_software_it_is_granted(local_site, gpu_clusters):
    dear, cheap = gpu_clusters
    other = Project.objects.get(slug="nlp")
    assert set(hardware_for_project(other)) == {local_site.hardware}
    allocation = Allocation.objects.get(project=local_site.project, cluster=cheap.cluster)
    allocation.hardware.add(cheap)  # restrict beta to its A100 node
    assert "beta-h100x8" not in {hw.slug for hw in hardware_for_project(local_site.project)}
    software = Software.objects.create(slug="ngc", name="NGC PyTorch", kind="container",
                                       image="docker://nvcr.io/nvidia/pytorch:24.05-py3")
    software.clusters.add(dear.cluster)
    assert list(software_for_projects(Project.objects.filter(pk=local_site.project.pk))) == [software]
    assert list(software_for_projects(Project.objects.filter(pk=other.pk))) == []
    with pytest.raises(SubmitError, match="not available on"):
        prepare_job(local_site.mallory, JobRequest(project=other, name="x", script="x",
                                                                  hardware=local_site.hardware, software=software))


def test_the_preview_shows_the_exact_script_and_the_estimate(client, local_site, gpu_clusters):
    dear, _ = gpu_clusters
    client.force_login(local_site.alice)
    response = client.post(reverse("job-preview"), {
        "project": local_site.project.pk, "name": "train", "hardware": dear.pk, "nodes": 2, "walltime": "02:00:00",
        "launcher": "torchrun", "script": "python train.py", "draft": "5e0e0000-0000-4000-8000-000000000000",
    }, HTTP_HX_REQUEST="true")
    html = response.content.decode()
    assert "preview-error" not in html, html
    assert response.context["estimate"].amount == Decimal("20.0000")  # 2 nodes × 5 × 2 h
    assert "#SBATCH --gres=gpu:a100:8" in html and "#SBATCH --nodes=2" in html and "#SBATCH --account=grp" in html
    assert "torchrun --nnodes=2 --nproc-per-node=8" in html
    assert "80.00 points left after this job" in html  # the 100-point budget minus 20


def test_advanced_edits_may_change_the_body_but_not_the_directives(local_site, gpu_clusters):
    dear, _ = gpu_clusters
    import uuid

    req = JobRequest(project=local_site.project, name="adv", script="python t.py", hardware=dear,
                             walltime="01:00:00", uuid=uuid.uuid4())

    def prepare(edited):
        return prepare_job(local_site.alice, JobRequest(**{**req.__dict__, "edited_script": edited}),
                                   require_account=False)

    script = prepare(None).script
    edited = script.replace("echo \"== start", "export EXTRA=1\necho \"== start")
    assert "export EXTRA=1" in prepare(edited).script
    for bad in (script.replace("--nodes=1", "--nodes=4"), script + "\n#SBATCH --qos=high\n",
                script.replace("#SBATCH --account=grp\n", "")):
        with pytest.raises(SubmitError, match="scheduler directives are set from the form") as refused:
            prepare(bad)
        assert refused.value.field == "edited_script"


def test_a_sweep_becomes_a_group_of_jobs_each_with_its_parameters(local_site):
    req = JobRequest(project=local_site.project, name="sweep", script='echo "lr=$LR bs=$BATCH"',
                             hardware=local_site.hardware, walltime="00:10:00")
    result = submit_sweep(local_site.alice, req, {"LR": [0.1, 0.01], "BATCH": [32, 64]})
    group = JobGroup.objects.get()
    jobs = list(Job.objects.filter(group=group).order_by("pk"))
    assert result.group == group and len(jobs) == 4
    assert [j.parameters for j in jobs] == [{"LR": 0.1, "BATCH": 32}, {"LR": 0.1, "BATCH": 64},
                                            {"LR": 0.01, "BATCH": 32}, {"LR": 0.01, "BATCH": 64}]
    assert [j.name for j in jobs] == ["sweep-0", "sweep-1", "sweep-2", "sweep-3"]
    assert build_spec(jobs[3]).env == {"LR": "0.01", "BATCH": "64"}
    assert result.estimate_total == Decimal("6.6668")  # 4 × 10 points × 10 minutes
    # The local backend has no scheduler arrays: each point is submitted on its own.
    assert not result.array and {j.array_index for j in jobs} == {None}


def test_a_sweep_is_reserved_all_or_nothing(local_site):
    req = JobRequest(project=local_site.project, name="big", script="true", hardware=local_site.hardware,
                             walltime="03:00:00")  # 30 points each: four do not fit in 100
    with pytest.raises(BudgetRefused):
        submit_sweep(local_site.alice, req, {"SEED": [1, 2, 3, 4]})
    assert Job.objects.count() == 0 and JobGroup.objects.count() == 0


@pytest.mark.parametrize(("sweep", "message"), [
    ({}, "a sweep is an object"), ({"lr": []}, "non-empty list"), ({"a b": [1]}, "not a valid name"),
    ({"x": list(range(11)), "y": list(range(10))}, "expands to 110 jobs"), ({"PATH": ["/tmp"]}, "set by Kakehashi"),
])
def test_bad_sweeps_are_explained(local_site, sweep, message):
    req = JobRequest(project=local_site.project, name="s", script="true", hardware=local_site.hardware)
    with pytest.raises(SubmitError, match=message):
        submit_sweep(local_site.alice, req, sweep)


def test_a_template_brings_its_files_and_launcher(local_site):
    sub = submit_job(local_site.alice, JobRequest(
        project=local_site.project, name="t", template="ddp-mnist", hardware=local_site.hardware))
    spec = build_spec(sub.job)
    assert sub.job.launcher == "torchrun" and "train.py" in spec.files
    assert b"DistributedDataParallel" in spec.files["train.py"]
    with pytest.raises(SubmitError, match="unknown job template"):
        prepare_job(local_site.alice, JobRequest(project=local_site.project, name="t",
                                                                template="nope", hardware=local_site.hardware))


def test_changing_the_project_offers_that_projects_presets(client, local_site, gpu_clusters):
    from portal.catalog.defaults import ensure_default_presets
    from portal.projects.models import Membership, Role

    ensure_default_presets()
    Membership.objects.create(user=local_site.alice, project=Project.objects.get(slug="nlp"), role=Role.MEMBER)
    client.force_login(local_site.alice)
    vision = client.get(reverse("job-presets"), {"project": local_site.project.pk}).content.decode()
    nlp = client.get(reverse("job-presets"), {"project": Project.objects.get(slug="nlp").pk}).content.decode()
    assert "Run on 8×A100" in vision and "Beta · 3.00 points/node-h · cheapest of 2" in vision
    assert "Run on 8×A100" in nlp and "not available to this project" in nlp and "Beta" not in nlp
    client.force_login(local_site.mallory)  # not a member of vision: nothing
    assert "Run on" not in client.get(reverse("job-presets"), {"project": local_site.project.pk}).content.decode()


def test_the_job_form_costs_as_many_statements_for_a_person_in_twenty_projects_as_in_one(client, local_site,
                                                                                           django_assert_max_num_queries):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from portal.projects.models import Membership, Role

    client.force_login(local_site.alice)
    with CaptureQueriesContext(connection) as one:
        assert client.get(reverse("job-new")).status_code == 200
    for n in range(19):
        project = Project.objects.create(slug=f"lab-{n}", name=f"Lab {n}")
        Membership.objects.create(user=local_site.alice, project=project, role=Role.MEMBER)
        Allocation.objects.create(project=project, cluster=local_site.cluster)
    with django_assert_max_num_queries(len(one.captured_queries) + 2):  # the page lists the projects themselves
        page = client.get(reverse("job-new"))
    assert page.status_code == 200 and all(f"Lab {n}" in page.content.decode() for n in range(19))
