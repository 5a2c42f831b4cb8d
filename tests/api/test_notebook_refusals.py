"""A notebook the API cannot run is refused with the field it concerns and why, before anything is queued."""

from __future__ import annotations

import pytest

from portal.budgets.models import LedgerEntry
from portal.catalog.models import Software
from portal.jobs import notebooks
from portal.jobs.models import Job
from tests.api.conftest import job_body
from tests.jobs.test_notebook_form import notebook

pytestmark = pytest.mark.django_db


JOBS = "/api/v1/jobs/"


@pytest.mark.parametrize(("nb", "parameters", "field", "message"), [
    ("{not json", {}, "notebook", "this is not valid JSON"),
    ({"hello": "world"}, {}, "notebook", "not a valid Jupyter notebook"),
    (notebook(params=None), {"lr": 1}, "parameters", "the notebook has no cell tagged 'parameters'"),
    (notebook(), {"learning_rate": 1}, "parameters", "unknown parameter learning_rate: the notebook's parameters cell sets epochs, lr"),
    (notebook(params="# set by papermill"), {"lr": 1}, "parameters",
     "unknown parameter lr: the notebook's parameters cell sets no names (write one assignment a line in it, e.g. lr = 0.1)"),
    (notebook(kernel="ir"), {}, "software", "the notebook's kernel 'ir' is not provided by plain shell (it provides: python3)"),
], ids=["not-json", "not-a-notebook", "no-parameters-cell", "unknown-parameter", "parameters-cell-without-names",
         "kernel-not-provided"])
def test_a_bad_notebook_is_refused_by_the_api_with_the_field_and_why(alice_api, nb, parameters, field, message):
    response = alice_api.post(JOBS, {**job_body(script=""), "notebook": nb, "parameters": parameters})
    assert response.status_code == 400, response.content
    assert response.json()["field"] == field and message in response.json()["detail"]
    _nothing_queued()


def test_a_kernel_the_chosen_software_does_not_provide_is_refused(alice_api, local_site):
    software = Software.objects.create(slug="r-4", name="R 4.4 (modules)", kind=Software.Kind.MODULES,
                                       modules=["R/4.4"], kernels=["ir"])
    software.clusters.add(local_site.cluster)
    response = alice_api.post(JOBS, {**job_body(script=""), "notebook": notebook(), "software": "r-4"})
    assert response.status_code == 400
    assert response.json() == {"detail": "the notebook's kernel 'python3' is not provided by R 4.4 (modules) (it provides: ir); "
                                         "choose other software or change the notebook's kernel",
                               "code": "invalid", "field": "software"}
    _nothing_queued()


def test_an_unknown_parameter_of_a_notebook_papermill_cannot_inspect_is_refused_with_the_names_its_cell_sets(
        alice_api, local_site):
    # papermill reads only Python parameters cells; an R notebook's names are read from its assignments.
    software = Software.objects.create(slug="r-4", name="R 4.4 (modules)", kind=Software.Kind.MODULES,
                                       modules=["R/4.4"], kernels=["ir"])
    software.clusters.add(local_site.cluster)
    nb = notebook(params="lr <- 0.1  # learning rate\nepochs = 2\nprint(lr)", body="print(lr * epochs)", kernel="ir")
    nb["metadata"]["kernelspec"]["language"] = "R"
    nb["metadata"]["language_info"] = {"name": "R"}
    for parameters in ({"learning_rate": 1}, {"lr": 0.5, "learning_rate": 1, "print": 2}):
        response = alice_api.post(JOBS, {**job_body(script=""), "notebook": nb, "software": "r-4", "parameters": parameters})
        assert response.status_code == 400, response.content
        assert response.json()["field"] == "parameters"
        assert response.json()["detail"].startswith("unknown parameter")
        assert "learning_rate" in response.json()["detail"]
        assert response.json()["detail"].endswith("the notebook's parameters cell sets epochs, lr")
    _nothing_queued()
    # The names it does set pass the check.
    assert notebooks.check(nb, {"lr": 0.5, "epochs": 3}, ["ir"], software="R", max_bytes=2**20) == "ir"


def test_a_notebook_over_the_size_limit_is_refused_by_the_api(alice_api, settings):
    settings.KAKEHASHI_MAX_NOTEBOOK_BYTES = 1024
    response = alice_api.post(JOBS, {**job_body(script=""), "notebook": notebook(body="x = 1\n" * 400), "parameters": {"lr": 1}})
    assert response.status_code == 400, response.content
    assert response.json() == {"detail": "the notebook is larger than 1 KiB; clear its outputs first",
                               "code": "invalid", "field": "notebook"}
    _nothing_queued()


def test_a_request_body_over_the_portals_body_limit_is_refused_with_the_notebook_limit_not_an_internal_error(
        alice_api, settings):
    settings.KAKEHASHI_MAX_NOTEBOOK_BYTES, settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1024, 2048
    response = alice_api.post(JOBS, {**job_body(script=""), "notebook": notebook(body="x = 1\n" * 1000)})
    assert response.status_code == 413, response.content
    assert response.json() == {"detail": "the request body is larger than 2 KiB: a notebook may be at most 1 KiB (clear "
                                         "its outputs first); put large data in the project's storage",
                               "code": "too_large"}
    _nothing_queued()


def test_a_sweep_over_a_name_the_notebook_does_not_have_is_refused(alice_api):
    response = alice_api.post("/api/v1/sweeps/", {**job_body(script=""), "notebook": notebook(), "sweep": {"lrate": [1, 2]}})
    assert response.status_code == 400 and "unknown parameter lrate" in response.json()["detail"]
    _nothing_queued()


def _nothing_queued():
    assert Job.objects.count() == 0
    assert LedgerEntry.objects.count() == 0
