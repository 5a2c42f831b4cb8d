"""A notebook runs headless on the cluster with papermill and the executed notebook comes back."""

from __future__ import annotations

import json

import nbformat
import pytest
from django.core.files.storage import default_storage

from portal.catalog.models import HardwareType, Software
from portal.dev.loopback import CONTAINER_IMAGE
from portal.jobs.actions.submit import submit_job
from portal.jobs.actions.sweeps import submit_sweep
from portal.jobs.actions.validation import JobRequest, SubmitError
from portal.jobs.models import Job, JobState
from tests.conftest import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def _notebook(body: str = "result = lr * epochs\nprint(f'result={result}')") -> dict:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    params = nbformat.v4.new_code_cell("lr = 0.1\nepochs = 1")
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell(body)]
    return json.loads(nbformat.writes(nb))


# Run by the notebook's kernel: where it runs (the image's marker exists only inside the container) and which Python.
WHERE = """import os, sys
print(f'result={lr * epochs}')
print('kernel python:', sys.executable)
print('image:', open('/etc/kakehashi-image').read().strip() if os.path.exists('/etc/kakehashi-image') else 'none')
print('host files:', 'visible' if os.path.exists('/etc/slurm/slurm.conf') or os.path.exists('/var/lib/gridengine') else 'hidden')
"""


def _outputs(job: Job) -> str:
    executed = nbformat.reads(default_storage.open(job.artifacts.get(path="notebook.ipynb").stored_name).read().decode(),
                              as_version=4)
    return "".join(o.get("text", "") for cell in executed.cells for o in cell.get("outputs", []))


def test_a_notebook_with_parameters_runs_on_slurm_and_the_executed_notebook_comes_back(hpc_site, live_worker):
    job = submit_job(hpc_site.alice, JobRequest(
        project=hpc_site.project, name="notebook", notebook=_notebook(WHERE), parameters={"lr": 0.5, "epochs": 4},
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
    # The kernel is the software's (the module's Python environment), not the portal's.
    assert "kernel python: /opt/kakehashi-cluster/pyenv/bin/python" in outputs, outputs


def test_a_notebook_runs_with_papermill_inside_the_container_on_tsubame_grid_engine(hpc_site, live_worker):
    job = submit_job(hpc_site.alice, JobRequest(
        project=hpc_site.project, name="notebook-in-container", notebook=_notebook(WHERE),
        parameters={"lr": 0.25, "epochs": 2}, hardware=HardwareType.objects.get(slug="tsubame-s-gpu"),
        software=Software.objects.get(image=CONTAINER_IMAGE), walltime="00:10:00")).job
    assert f'apptainer exec --nv --bind "$KAKEHASHI_JOB_DIR" {CONTAINER_IMAGE} bash' in job.rendered_script
    assert "qsub -g kkdemo" in job.submit_command
    job = wait_for(lambda: Job.objects.filter(pk=job.pk, artifacts__path="notebook.ipynb").first(), timeout=180,
                   message="the executed notebook from TSUBAME")
    assert job.state == JobState.COMPLETED, job.state_reason
    outputs = _outputs(job)
    # papermill's kernel ran inside the image: its marker is there, the host's scheduler files are not.
    assert f"image: {CONTAINER_IMAGE}" in outputs and "host files: hidden" in outputs, outputs
    assert "result=0.5" in outputs


def test_a_failing_notebook_fails_and_still_returns_the_executed_notebook(hpc_site, live_worker):
    nb = _notebook()
    nb["cells"][1]["source"] = "raise ValueError('bad learning rate')"
    job = submit_job(hpc_site.alice, JobRequest(
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
    with pytest.raises(SubmitError, match=message):
        submit_job(hpc_site.alice, JobRequest(
            project=hpc_site.project, name="nb", notebook=notebook,
            hardware=HardwareType.objects.get(slug="slurm-a100x1")))
    assert Job.objects.count() == 0


def test_a_notebook_sweep_on_slurm_is_one_array_and_each_executed_notebook_has_its_own_parameters(hpc_site, live_worker):
    req = JobRequest(
        project=hpc_site.project, name="nb-sweep", notebook=_notebook(), parameters={"epochs": 2},
        hardware=HardwareType.objects.get(slug="slurm-a100x1"), software=Software.objects.get(slug="pytorch-2-13"),
        walltime="00:10:00")
    sweep = submit_sweep(hpc_site.alice, req, {"lr": [0.25, 1.5]})
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
