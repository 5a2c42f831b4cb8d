"""Small things the pages said that were not so: where a project's jobs run, parameters as Python dict text, an
array element's two ids, where a notebook's cell output is, two units for one upload limit, and outputs a job page
stopped asking for before it listed them."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.core.management import call_command
from django.urls import reverse

from portal.catalog.models import HardwareType
from portal.clusters.models import Allocation, Cluster, Kind
from portal.jobs.models import Job, JobGroup, JobState
from portal.projects.models import Project

pytestmark = pytest.mark.django_db


def test_the_demo_project_does_not_say_its_jobs_run_on_this_machine_once_it_has_hpc_clusters(client, local_site):
    call_command("setup_demo")
    demo = Project.objects.get(slug="demo")
    for slug, name in (("tsubame", "TSUBAME 4.0"), ("abci", "ABCI 3.0")):
        Allocation.objects.create(project=demo, cluster=Cluster.objects.create(
            slug=slug, name=name, kind=Kind.SGE, login_host=slug, host_keys="x"), group="kk")
    client.force_login(demo.memberships.get().user)
    page = client.get(reverse("project-detail", args=["demo"])).content.decode()
    assert "jobs run on this machine" not in page
    assert "This machine" in page and "TSUBAME 4.0" in page and "ABCI 3.0" in page  # the Clusters card says where


def _sweep_element(site, kind: str, scheduler_id: str, array_id: str) -> Job:
    cluster = Cluster.objects.create(slug=f"{kind}-x", name=f"{kind} cluster", kind=kind, login_host="h", host_keys="x")
    hardware = HardwareType.objects.create(cluster=cluster, slug=f"{kind}-cpu", name="CPU", cpus_per_node=2,
                                           max_nodes=1, rate=Decimal("1"))
    group = JobGroup.objects.create(project=site.project, user=site.alice, name="lr-sweep",
                                    sweep={"LR": [0.1, 0.01], "OPT": ["adam w"]}, scheduler_id=array_id)
    return Job.objects.create(project=site.project, user=site.alice, cluster=cluster, hardware=hardware, name="lr-1",
                              group=group, array_index=1, parameters={"LR": 0.1, "OPT": "adam w"},
                              scheduler_id=scheduler_id, state=JobState.RUNNING, walltime_seconds=60)


def test_sweep_parameters_read_as_the_researcher_typed_them_not_as_python(client, local_site):
    job = _sweep_element(local_site, Kind.SLURM, "1262_1", "1262")
    client.force_login(local_site.alice)
    page = client.get(reverse("job-detail", args=[job.pk])).content.decode()
    sweep = client.get(reverse("job-group", args=[job.group.pk])).content.decode()
    assert "<code>LR=0.1 OPT=&#x27;adam w&#x27;</code>" in page and "{&#x27;LR&#x27;" not in page
    assert '<code class="me-2">LR = 0.1, 0.01</code>' in sweep and '<code class="me-2">OPT = adam w</code>' in sweep
    assert "{&#x27;LR&#x27;" not in sweep


def test_a_site_admin_sees_scheduler_mappings_as_key_value(client, local_site, admin_user):
    cluster = Cluster.objects.create(slug="s", name="S", kind=Kind.SLURM, login_host="h", host_keys="x")
    HardwareType.objects.create(cluster=cluster, slug="s-a100", name="A100", gpu_model="a100", gpus_per_node=8,
                                scheduler_mapping={"partition": "gpu", "gres": "gpu:a100:8"})
    client.force_login(admin_user)
    page = client.get(reverse("site-admin")).content.decode()
    assert ">gres=gpu:a100:8 partition=gpu</code>" in page and "{&#x27;partition&#x27;" not in page  # jsonb's order


@pytest.mark.parametrize(("kind", "scheduler_id", "array_id", "note"), [
    (Kind.SLURM, "1262_1", "1262", "Slurm also gives each element a job id of its own, which its log shows"),
    (Kind.SGE, "1262.1", "1262", "its log shows the array's job id (<code>JOB_ID</code>) and the element as "
                                 "<code>SGE_TASK_ID=1</code>"),
])
def test_an_array_elements_page_explains_why_its_log_shows_another_job_id(client, local_site, kind, scheduler_id,
                                                                          array_id, note):
    job = _sweep_element(local_site, kind, scheduler_id, array_id)
    client.force_login(local_site.alice)
    status = client.get(reverse("job-status", args=[job.pk])).content.decode()
    assert f'<code id="scheduler-id">{scheduler_id}</code>' in status
    assert "element 1 of array 1262" in status and note in status


def test_a_notebook_jobs_page_says_papermill_writes_cell_output_to_stderr(client, local_site):
    job = Job.objects.create(project=local_site.project, user=local_site.alice, cluster=local_site.cluster,
                             hardware=local_site.hardware, name="nb", kind=Job.Kind.NOTEBOOK, walltime_seconds=60)
    script = Job.objects.create(project=local_site.project, user=local_site.alice, cluster=local_site.cluster,
                                hardware=local_site.hardware, name="sh", walltime_seconds=60)
    client.force_login(local_site.alice)
    page = client.get(reverse("job-detail", args=[job.pk])).content.decode()
    assert 'id="notebook-log-note"' in page and "writes each cell's output to its log on <strong>stderr</strong>" in page
    assert 'id="notebook-log-note"' not in client.get(reverse("job-detail", args=[script.pk])).content.decode()


def test_the_upload_form_and_its_refusal_name_the_limit_in_the_same_unit(client, local_site, settings,
                                                                         filesystem_storage):
    from django.core.files.uploadedfile import SimpleUploadedFile

    settings.KAKEHASHI_MAX_UPLOAD_BYTES = 1024 * 1024  # 1.0 MiB
    client.force_login(local_site.alice)
    form = client.get(reverse("data")).content.decode()
    assert "At most 1.0 MiB (1,048,576 bytes)." in form and "1.0 MB" not in form
    refused = client.post(reverse("data"), {"project": local_site.project.pk, "path": "big.bin",
                                            "file": SimpleUploadedFile("big.bin", b"x" * (1024 * 1024 + 100_000))},
                          follow=True).content.decode()
    assert "the upload limit of 1.0 MiB (1,048,576 bytes)" in refused


def test_a_running_job_the_budget_is_cancelling_says_so_until_the_scheduler_stops_it(client, local_site):
    from datetime import timedelta

    from django.utils import timezone

    from portal.budgets.models import Budget
    from portal.usage.enforcement import enforce

    # A job that has run an hour at 10 points an hour; the enforcer finds the budget lowered to 5 points.
    job = Job.objects.create(project=local_site.project, user=local_site.alice, cluster=local_site.cluster,
                             hardware=local_site.hardware, name="long", state=JobState.RUNNING, scheduler_id="local-1",
                             walltime_seconds=7200, estimate_unit="points", started_at=timezone.now() - timedelta(hours=1))
    Budget.objects.filter(pk=local_site.budget.pk).update(amount=5)
    assert enforce(Budget.objects.get(pk=local_site.budget.pk)).cancelled == [job.pk]
    client.force_login(local_site.alice)
    status = client.get(reverse("job-status", args=[job.pk])).content.decode()
    assert ("Cancel asked for (cancelled by your project&#x27;s strict budget: 10.00 of 5.00 points used (spent 0.00 "
            "+ running jobs 10.00)): waiting for the scheduler to stop the job.") in status
    assert 'data-cause="cancel_requested"' in status and "by the project&#x27;s strict budget" in status


def test_a_job_page_that_stops_asking_for_outputs_shows_the_files_collected_while_it_asked(client, local_site):
    """The part of the job page that lists outputs/ asks again every 3 s until the files are home. A collection
    that commits while one answer is made (here: right when the answer reads the job's logs) must not end the asking
    with an answer that lists nothing: seen under load as "No files in outputs/" for good beside an executed notebook."""
    from django.db import connection
    from django.utils import timezone

    from portal.jobs.models import JobArtifact, JobOutput

    job = Job.objects.create(project=local_site.project, user=local_site.alice, cluster=local_site.cluster,
                             hardware=local_site.hardware, name="nb", scheduler_id="kh-1", remote_dir="/tmp/kh-1",
                             state=JobState.COMPLETED, walltime_seconds=60)
    for stream in ("stdout", "stderr"):
        JobOutput.objects.create(job=job, stream=stream, complete=True, fetched_at=timezone.now())
    collected = []

    def collection_commits_meanwhile(execute, sql, params, many, context):
        result = execute(sql, params, many, context)
        if "jobs_joboutput" in sql and not collected:
            collected.append(JobArtifact.objects.create(job=job, path="result.csv", size=3, stored_name="x/result.csv"))
        return result

    client.force_login(local_site.alice)
    with connection.execute_wrapper(collection_commits_meanwhile):
        answer = client.get(reverse("job-detail", args=[job.pk]) + "?part=outputs", headers={"HX-Request": "true"})
    assert collected, "the answer never read the job's logs: this test no longer races anything"
    if answer.status_code == 286:  # the last answer the page asks for: it must list what is there
        assert "result.csv" in answer.content.decode()
    else:
        assert answer.status_code == 200 and "No files" in answer.content.decode()
        second = client.get(reverse("job-detail", args=[job.pk]) + "?part=outputs", headers={"HX-Request": "true"})
        assert second.status_code == 286 and "result.csv" in second.content.decode()
