"""A notebook travels with the files beside it (metadata.kakehashi.files): they land next to it in the job's
directory, where papermill runs it; bad paths are refused; and a notebook without software on a real scheduler is
refused before it is queued, naming the software that would do."""

from __future__ import annotations

import base64
import json

import pytest

from portal.catalog.models import Software
from portal.jobs.models import Job
from tests.api.conftest import job_body
from tests.conftest import ended_job, wait_for
from tests.jobs.test_notebook_form import notebook

JOBS = "/api/v1/jobs/"


def _with_files(nb: dict, files: dict[str, bytes]) -> dict:
    nb["metadata"]["kakehashi"] = {"files": {p: base64.b64encode(b).decode() for p, b in files.items()}}
    return nb


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_the_files_sent_beside_a_notebook_are_next_to_it_when_it_runs(alice_api, local_site, live_worker):
    nb = notebook(body="import utils\nimport csv\nrows = list(csv.reader(open('data/labels.csv')))\n"
                       "print('answer', utils.answer(), len(rows))")
    nb = _with_files(nb, {"utils.py": b"def answer():\n    return 42\n", "data/labels.csv": b"cat,1\ndog,2\n"})
    response = alice_api.post(JOBS, {**job_body(script=""), "notebook": nb})
    assert response.status_code == 201, response.content
    job = wait_for(lambda: ended_job(response.json()["id"]), timeout=90, message="the notebook job to end")
    assert job.state == "completed", job.events.last().reason
    # Outputs are collected once the job has ended.
    job = wait_for(lambda: Job.objects.filter(pk=job.pk, artifacts__path="notebook.ipynb").first(), timeout=60,
                   message="the executed notebook")
    executed = job.artifacts.get(path="notebook.ipynb")
    from portal.storage.actions import open_job_output

    text = open_job_output(executed.stored_name).read().decode()
    assert "answer 42 2" in text
    assert "utils.py" not in json.loads(text)["metadata"].get("kakehashi", {}).get("files", {})


@pytest.mark.django_db
@pytest.mark.parametrize(("path", "message"), [
    ("../secret", "cannot be sent beside the notebook"),
    ("/etc/passwd", "cannot be sent beside the notebook"),
    ("parameters.json", "the job's directory has its own parameters.json"),
    ("a b.txt", "cannot be sent beside the notebook"),
])
def test_a_file_beside_a_notebook_with_a_bad_path_is_refused(alice_api, local_site, path, message):
    response = alice_api.post(JOBS, {**job_body(script=""), "notebook": _with_files(notebook(), {path: b"x"})})
    assert response.status_code == 400 and response.json()["field"] == "notebook", response.content
    assert message in response.json()["detail"]
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_a_notebook_without_software_on_a_scheduler_is_refused_naming_the_software_that_would_do(
        alice_api, local_site):
    from portal.catalog.models import HardwareType
    from portal.clusters.models import Allocation, Cluster, Kind

    slurm = Cluster.objects.create(slug="slurm", name="Slurm lab", kind=Kind.SLURM, login_host="slurm", host_keys="x")
    Allocation.objects.create(project=local_site.project, cluster=slurm, group="kk")
    HardwareType.objects.create(cluster=slurm, slug="cpu", name="CPU node", cpus_per_node=4, max_nodes=1,
                                max_walltime_hours=2, rate=1, rate_unit="points")
    body = {**job_body(script="", hardware="cpu"), "notebook": notebook(), "dry_run": True}
    refused = alice_api.post(JOBS, body)
    assert refused.status_code == 400 and refused.json()["field"] == "software"
    assert "no software on Slurm lab provides them for project vision" in refused.json()["detail"]
    torch = Software.objects.create(slug="torch", name="PyTorch + papermill (modules)", kind="modules",
                                    modules=["pytorch"], provides=["torch", "papermill"])
    torch.clusters.add(slurm)
    refused = alice_api.post(JOBS, body)
    assert refused.json()["detail"] == ("a notebook runs with papermill and its kernel 'python3' inside software: choose "
                                        "one that provides them on Slurm lab: PyTorch + papermill (modules)")
    assert alice_api.post(JOBS, {**body, "software": "torch"}).status_code == 200
