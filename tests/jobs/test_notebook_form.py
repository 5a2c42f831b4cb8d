"""A researcher runs a notebook from the job form: uploaded or picked from the project's storage, its parameters
cell shown with an input per parameter. Bad notebooks are refused with a clear message before anything is queued."""

from __future__ import annotations

import json

import nbformat
import pytest
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from portal.budgets.models import LedgerEntry
from portal.jobs.models import Job
from portal.storage.models import StoredFile

pytestmark = pytest.mark.django_db


def notebook(params: str | None = "lr = 0.1  # learning rate\nepochs = 2", body: str = "print(lr * epochs)",
             kernel: str = "python3") -> dict:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": kernel, "display_name": kernel, "language": "python"}
    cells = []
    if params is not None:
        cell = nbformat.v4.new_code_cell(params)
        cell.metadata["tags"] = ["parameters"]
        cells.append(cell)
    nb.cells = [*cells, nbformat.v4.new_code_cell(body)]
    return json.loads(nbformat.writes(nb))


def upload(content: dict | bytes, name: str = "analysis.ipynb") -> SimpleUploadedFile:
    data = content if isinstance(content, bytes) else json.dumps(content).encode()
    return SimpleUploadedFile(name, data, content_type="application/x-ipynb+json")


def _form(site, **fields) -> dict:
    return {"project": site.project.pk, "name": "nb", "hardware": site.hardware.pk, "nodes": 1,
            "walltime": "00:10:00", "launcher": "script", "script": "", **fields}


def _nothing_queued():
    assert Job.objects.count() == 0
    assert LedgerEntry.objects.count() == 0


def test_choosing_a_notebook_shows_its_parameters_cell_with_an_input_per_parameter(client, local_site):
    client.force_login(local_site.alice)
    response = client.post(reverse("job-notebook"), _form(local_site, notebook_file=upload(notebook())))
    page = response.content.decode()
    assert response.status_code == 200
    assert "lr = 0.1  # learning rate" in page  # the cell itself
    assert 'name="param_lr" id="id_param_lr" value="0.1"' in page
    assert 'name="param_epochs" id="id_param_epochs" value="2"' in page
    assert "learning rate" in page and "<code>python3</code>" in page


def test_a_notebook_uploaded_in_the_form_is_queued_with_the_values_typed_for_its_parameters(client, local_site):
    client.force_login(local_site.alice)
    response = client.post(reverse("job-new"), _form(local_site, notebook_file=upload(notebook()),
                                                      param_lr="0.5", param_epochs="4"))
    job = Job.objects.get()
    assert response.status_code == 302 and response.url == reverse("job-detail", args=[job.pk])
    assert job.kind == Job.Kind.NOTEBOOK and job.parameters == {"lr": 0.5, "epochs": 4}
    assert "".join(job.notebook["cells"][0]["source"]).startswith("lr = 0.1")
    assert "python -m papermill notebook.ipynb" in job.script and "-k python3" in job.script


def test_a_notebook_from_the_projects_storage_can_be_picked_but_not_another_projects(client, local_site):
    def stored(project, path):
        name = default_storage.save(f"projects/{project.slug}/{path}", ContentFile(json.dumps(notebook()).encode()))
        return StoredFile.objects.create(project=project, path=path, storage_name=name, size=100, sha256="0" * 64)

    ours, theirs = stored(local_site.project, "nb/analysis.ipynb"), stored(local_site.other, "secret.ipynb")
    client.force_login(local_site.alice)
    page = client.get(reverse("job-new")).content.decode()
    assert "vision: nb/analysis.ipynb" in page and "secret.ipynb" not in page
    refused = client.post(reverse("job-new"), _form(local_site, stored_notebook=theirs.pk))
    assert "stored_notebook" in refused.context["form"].errors
    _nothing_queued()
    response = client.post(reverse("job-new"), _form(local_site, stored_notebook=ours.pk, param_lr="0.25"))
    assert response.status_code == 302
    job = Job.objects.get()
    assert job.kind == Job.Kind.NOTEBOOK and job.parameters == {"lr": 0.25}


def test_a_sweep_in_the_form_varies_the_notebooks_parameters(client, local_site):
    client.force_login(local_site.alice)
    response = client.post(reverse("job-new"), _form(local_site, notebook_file=upload(notebook()), param_epochs="3",
                                                      sweep="lr=0.1,0.2"))
    assert response.status_code == 302
    assert sorted(j.parameters["lr"] for j in Job.objects.all()) == [0.1, 0.2]
    assert {j.parameters["epochs"] for j in Job.objects.all()} == {3}
    group = Job.objects.first().group
    table = client.get(reverse("job-group", args=[group.pk])).content.decode()
    for job in Job.objects.filter(group=group):  # each point's row names its parameters as typed
        row = table.split(f'<tr data-job="{job.pk}">')[1].split("</tr>")[0]
        assert '<code class="me-2">epochs=3</code>' in row and f'<code class="me-2">lr={job.parameters["lr"]}</code>' in row
    assert "<th scope=\"col\">Executed notebook</th>" in table


@pytest.mark.parametrize(("content", "message"), [
    (b"{not json", "this file is not JSON, so not a Jupyter notebook"),
    ({"cells": "nope"}, "this is not a valid Jupyter notebook"),
])
def test_a_file_that_is_not_a_notebook_is_refused_in_the_form(client, local_site, content, message):
    client.force_login(local_site.alice)
    response = client.post(reverse("job-new"), _form(local_site, notebook_file=upload(content)))
    assert message in response.content.decode()
    assert "notebook_file" in response.context["form"].errors
    _nothing_queued()


def test_a_notebook_over_the_size_limit_is_refused_in_the_form(client, local_site, settings):
    settings.KAKEHASHI_MAX_NOTEBOOK_BYTES = 1024
    client.force_login(local_site.alice)
    response = client.post(reverse("job-new"), _form(local_site, notebook_file=upload(notebook(body="x = 1\n" * 400))))
    assert "the notebook is larger than 1 KiB" in response.content.decode()
    _nothing_queued()


def test_a_refused_notebook_submit_keeps_the_notebook_and_the_typed_values(client, local_site):
    client.force_login(local_site.alice)
    response = client.post(reverse("job-new"), _form(local_site, notebook_file=upload(notebook()), walltime="nope",
                                                      param_lr="0.7"))
    page = response.content.decode()
    assert "is not a duration" in page
    assert 'name="param_lr" id="id_param_lr" value="0.7"' in page
    kept = response.context["form"].data["notebook_json"]
    assert "".join(json.loads(kept)["cells"][0]["source"]).startswith("lr = 0.1")
    _nothing_queued()
    # Submitted again without choosing the file again: the kept notebook is the one that runs.
    response = client.post(reverse("job-new"), _form(local_site, notebook_json=kept, param_lr="0.7"))
    assert response.status_code == 302 and Job.objects.get().parameters == {"lr": 0.7}


def test_clone_and_edit_of_a_notebook_job_brings_the_notebook_and_its_values_back(client, local_site):
    client.force_login(local_site.alice)
    client.post(reverse("job-new"), _form(local_site, notebook_file=upload(notebook()), param_lr="0.3"))
    job = Job.objects.get()
    page = client.get(reverse("job-new") + f"?clone={job.pk}").content.decode()
    assert 'name="param_lr" id="id_param_lr" value="0.3"' in page  # the value it ran with
    assert 'name="param_epochs" id="id_param_epochs" value="2"' in page  # the notebook's own
    assert 'name="notebook_json"' in page and "python -m papermill" not in page
    # Run again as it is: the same notebook, nothing chosen again.
    form = client.get(reverse("job-new") + f"?clone={job.pk}").context["form"]
    response = client.post(reverse("job-new"), _form(local_site, name="nb-again", notebook_json=form.initial["notebook_json"],
                                                      param_lr="0.3"))
    assert response.status_code == 302
    again = Job.objects.get(name="nb-again")
    assert again.notebook == job.notebook and again.parameters == {"lr": 0.3}


def test_a_kernel_the_chosen_software_does_not_provide_is_refused_on_the_software_field(client, local_site):
    from portal.catalog.models import Software

    r_env = Software.objects.create(slug="r-4", name="R 4.4 (modules)", kind=Software.Kind.MODULES, modules=["R/4.4"],
                                    kernels=["ir"])
    r_env.clusters.add(local_site.cluster)
    client.force_login(local_site.alice)
    response = client.post(reverse("job-new"), _form(local_site, notebook_file=upload(notebook()), software=r_env.pk))
    assert response.context["form"].errors["software"] == [
        "the notebook's kernel 'python3' is not provided by R 4.4 (modules) (it provides: ir); choose other software "
        "or change the notebook's kernel"]
    _nothing_queued()


@pytest.mark.parametrize(("params", "fields", "message"), [
    ("lr = 0.1\nepochs = 2", {"param_lrate": "0.5"}, "unknown parameter lrate: the notebook&#x27;s parameters cell sets epochs, lr"),
    ("lr = 0.1\nepochs = 2", {"sweep": "lrate=0.1,0.2"}, "unknown parameter lrate: the notebook&#x27;s parameters cell sets epochs, lr"),
    ("# papermill puts the values after this cell", {"sweep": "lr=0.1,0.2"},
     "unknown parameter lr: the notebook&#x27;s parameters cell sets no names (write one assignment a line in it, e.g. lr = 0.1)"),
    (None, {"param_lr": "0.5"}, "parameters were given but the notebook has no cell tagged &#x27;parameters&#x27;"),
], ids=["unknown-name", "unknown-name-in-sweep", "parameters-cell-without-names", "no-parameters-cell"])
def test_a_parameter_the_notebooks_parameters_cell_does_not_set_is_refused_in_the_form(client, local_site, params,
                                                                                       fields, message):
    client.force_login(local_site.alice)
    response = client.post(reverse("job-new"), _form(local_site, notebook_file=upload(notebook(params=params)), **fields))
    assert response.status_code == 200
    assert message in response.content.decode()
    _nothing_queued()
