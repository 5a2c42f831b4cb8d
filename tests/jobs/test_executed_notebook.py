"""The executed notebook comes back to the job page: rendered (in a sandbox of its own), downloadable as .ipynb,
with the injected parameters, or with the cell that failed and its traceback."""

from __future__ import annotations

import html as html_lib
import json
import re

import pytest
import requests
from django.urls import reverse

from portal.jobs.actions.submit import submit_job
from portal.jobs.actions.sweeps import submit_sweep
from portal.jobs.actions.validation import JobRequest
from portal.jobs.models import Job, JobState
from tests.conftest import wait_for
from tests.jobs.test_notebook_form import notebook

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def text_of(html: str) -> str:
    """What the rendered page reads as (code is split into highlighted tokens)."""
    return html_lib.unescape(re.sub(r"<[^>]+>", "", html))


def _run(site, nb: dict, parameters: dict, name: str = "nb") -> Job:
    job = submit_job(site.alice, JobRequest(
        project=site.project, name=name, notebook=nb, parameters=parameters, hardware=site.hardware,
        walltime="00:10:00")).job
    return wait_for(lambda: Job.objects.filter(pk=job.pk, artifacts__path="notebook.ipynb").first(), timeout=120,
                    message="the executed notebook")


def test_the_job_page_shows_the_executed_notebook_with_its_injected_parameters_and_offers_the_ipynb(
        client, local_site, live_worker):
    job = _run(local_site, notebook(body="print(f'result={lr * epochs}')"), {"lr": 0.5, "epochs": 4})
    assert job.state == JobState.COMPLETED, job.state_reason
    client.force_login(local_site.alice)

    page = client.get(reverse("job-detail", args=[job.pk])).content.decode()
    frame = f'<iframe class="kk-notebook-frame" id="notebook-frame" sandbox title="The executed notebook of job nb" ' \
            f'src="{reverse("job-executed-notebook", args=[job.pk])}">'
    assert frame in page
    assert "<code>lr=0.5</code>, <code>epochs=4</code>" in page

    rendered = client.get(reverse("job-executed-notebook", args=[job.pk]))
    assert rendered.status_code == 200
    policy = rendered["Content-Security-Policy"]
    assert policy.startswith("sandbox;") and "default-src 'none'" in policy and "script-src" not in policy
    assert rendered["X-Frame-Options"] == "SAMEORIGIN"
    html = rendered.content.decode()
    assert "injected-parameters" in html  # papermill's cell, after the notebook's own parameters cell
    text = text_of(html)
    assert "# Parameters\nlr = 0.5\nepochs = 4" in text
    assert "result=2.0" in text

    artifact = job.artifacts.get(path="notebook.ipynb")
    download = client.get(reverse("job-artifact", args=[job.pk, artifact.pk]))
    # Outputs live in the object store: the download is a presigned GET, named as the file.
    assert download.status_code == 302
    fetched = requests.get(download["Location"], timeout=30)
    assert fetched.status_code == 200 and "notebook.ipynb" in fetched.headers.get("Content-Disposition", "")
    executed = json.loads(fetched.content)
    assert executed["metadata"]["papermill"]["parameters"] == {"lr": 0.5, "epochs": 4}

    # Someone outside the project sees neither the job nor its notebook.
    client.force_login(local_site.mallory)
    assert client.get(reverse("job-executed-notebook", args=[job.pk])).status_code == 404


def test_a_failing_notebook_fails_the_job_and_its_page_shows_the_failing_cell_and_traceback(
        client, local_site, live_worker):
    job = _run(local_site, notebook(body="raise ValueError('bad learning rate: ' + str(lr))"), {"lr": 9},
               name="bad-nb")
    assert job.state == JobState.FAILED and job.exit_code == 1
    client.force_login(local_site.alice)
    text = text_of(client.get(reverse("job-executed-notebook", args=[job.pk])).content.decode())
    assert "An Exception was encountered at" in text  # papermill's banner, linking to the cell
    assert "raise ValueError('bad learning rate: ' + str(lr))" in text  # the failing cell
    assert "ValueError: bad learning rate: 9" in text  # its traceback's last line


def test_a_notebook_sweeps_table_compares_the_points_parameters_beside_their_executed_notebooks(
        client, local_site, live_worker):
    req = JobRequest(project=local_site.project, name="nb-sweep", notebook=notebook(), parameters={"epochs": 3},
                             hardware=local_site.hardware, walltime="00:10:00")
    sweep = submit_sweep(local_site.alice, req, {"lr": [0.1, 0.2]})
    for job in sweep.group.jobs.all():
        wait_for(lambda job=job: Job.objects.filter(pk=job.pk, artifacts__path="notebook.ipynb").first(), timeout=120,
                 message="the executed notebooks")
    client.force_login(local_site.alice)
    table = client.get(reverse("job-group", args=[sweep.group.pk])).content.decode()
    for job in sweep.group.jobs.all():
        lr = job.parameters["lr"]
        row = table.split(f'<tr data-job="{job.pk}">')[1].split("</tr>")[0]
        assert '<code class="me-2">epochs=3</code>' in row and f'<code class="me-2">lr={lr}</code>' in row, row
        assert f'<a href="{reverse("job-executed-notebook", args=[job.pk])}" target="_blank" rel="noopener">view</a>' in table


def test_a_notebook_file_that_nbconvert_cannot_read_is_said_so_on_its_page_not_an_error(client, local_site, live_worker):
    job = submit_job(local_site.alice, JobRequest(
        project=local_site.project, name="not-nb", script='echo "{broken" > "$KAKEHASHI_OUTPUT_DIR/notebook.ipynb"\n',
        hardware=local_site.hardware, walltime="00:10:00")).job
    wait_for(lambda: Job.objects.filter(pk=job.pk, artifacts__path="notebook.ipynb").first(), timeout=120,
             message="the job's output")
    client.force_login(local_site.alice)
    rendered = client.get(reverse("job-executed-notebook", args=[job.pk]))
    assert rendered.status_code == 200 and rendered["Content-Security-Policy"].startswith("sandbox;")
    assert "outputs/notebook.ipynb is not a notebook nbconvert can read" in rendered.content.decode()
