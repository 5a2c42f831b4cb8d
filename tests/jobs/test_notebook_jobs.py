"""A notebook runs headless on the cluster with papermill and the executed notebook comes back."""

from __future__ import annotations

import json

import nbformat
import pytest
from django.core.files.storage import default_storage

from portal.catalog.models import HardwareType, Software
from portal.jobs import actions
from portal.jobs.models import Job, JobState
from tests.conftest import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def _notebook() -> dict:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    params = nbformat.v4.new_code_cell("lr = 0.1\nepochs = 1")
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell("result = lr * epochs\nprint(f'result={result}')")]
    return json.loads(nbformat.writes(nb))


def test_a_notebook_with_parameters_runs_on_slurm_and_the_executed_notebook_comes_back(hpc_site, live_worker):
    job = actions.submit_job(hpc_site.alice, actions.JobRequest(
        project=hpc_site.project, name="notebook", notebook=_notebook(), parameters={"lr": 0.5, "epochs": 4},
        hardware=HardwareType.objects.get(slug="slurm-a100x1"), software=Software.objects.get(slug="pytorch-2-13"),
        walltime="00:10:00")).job
    assert job.kind == Job.Kind.NOTEBOOK and "papermill notebook.ipynb" in job.script
    job = wait_for(lambda: Job.objects.filter(pk=job.pk, artifacts__path="notebook.ipynb").first(), timeout=120,
                   message="the executed notebook")
    assert job.state == JobState.COMPLETED, job.state_reason
    executed = nbformat.reads(default_storage.open(job.artifacts.get(path="notebook.ipynb").stored_name).read().decode(),
                              as_version=4)
    assert executed.metadata["papermill"]["parameters"] == {"lr": 0.5, "epochs": 4}
    outputs = "".join(o.get("text", "") for cell in executed.cells for o in cell.get("outputs", []))
    assert "result=2.0" in outputs


def test_a_failing_notebook_fails_and_still_returns_the_executed_notebook(hpc_site, live_worker):
    nb = _notebook()
    nb["cells"][1]["source"] = "raise ValueError('bad learning rate')"
    job = actions.submit_job(hpc_site.alice, actions.JobRequest(
        project=hpc_site.project, name="bad-notebook", notebook=nb, parameters={},
        hardware=HardwareType.objects.get(slug="slurm-a100x1"), software=Software.objects.get(slug="pytorch-2-13"),
        walltime="00:10:00")).job
    job = wait_for(lambda: Job.objects.filter(pk=job.pk, artifacts__path="notebook.ipynb").first(), timeout=120,
                   message="the executed notebook")
    assert job.state == JobState.FAILED and job.exit_code == 1
    text = default_storage.open(job.artifacts.get(path="notebook.ipynb").stored_name).read().decode()
    assert "bad learning rate" in text


@pytest.mark.parametrize(("notebook", "message"), [
    ("not a notebook", "must be a Jupyter notebook"),
    ({"cells": "nope"}, "not a valid Jupyter notebook"),
])
def test_something_that_is_not_a_notebook_is_refused(hpc_site, notebook, message):
    with pytest.raises(actions.SubmitError, match=message):
        actions.submit_job(hpc_site.alice, actions.JobRequest(
            project=hpc_site.project, name="nb", notebook=notebook,
            hardware=HardwareType.objects.get(slug="slurm-a100x1")))
    assert Job.objects.count() == 0


def test_a_notebook_sweep_on_slurm_is_one_array_and_each_executed_notebook_has_its_own_parameters(hpc_site, live_worker):
    req = actions.JobRequest(
        project=hpc_site.project, name="nb-sweep", notebook=_notebook(), parameters={"epochs": 2},
        hardware=HardwareType.objects.get(slug="slurm-a100x1"), software=Software.objects.get(slug="pytorch-2-13"),
        walltime="00:10:00")
    sweep = actions.submit_sweep(hpc_site.alice, req, {"lr": [0.25, 1.5]})
    assert sweep.array
    jobs = [
        wait_for(lambda job=job: Job.objects.filter(pk=job.pk, artifacts__path="notebook.ipynb").first(), timeout=120,
                 message=f"the executed notebook of element {job.array_index}")
        for job in sweep.group.jobs.order_by("array_index")
    ]
    for job, lr in zip(jobs, (0.25, 1.5), strict=True):
        assert job.state == JobState.COMPLETED, job.state_reason
        stored = job.artifacts.get(path="notebook.ipynb").stored_name
        executed = nbformat.reads(default_storage.open(stored).read().decode(), as_version=4)
        assert executed.metadata["papermill"]["parameters"] == {"epochs": 2, "lr": lr}
        outputs = "".join(o.get("text", "") for cell in executed.cells for o in cell.get("outputs", []))
        assert f"result={lr * 2}" in outputs
