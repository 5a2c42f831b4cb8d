"""A researcher, in Chromium, uploads a notebook in the job form, sets its parameters, runs it and reads the
executed notebook on the job page. The notebook's outputs hold script: none of it runs, in the frame or in a tab
of its own, and the portal's page is untouched."""

from __future__ import annotations

import json
import re

import nbformat
import pytest
from playwright.sync_api import expect

from tests.browser.conftest import job_form_field, log_in, open_new_job_form

pytestmark = [pytest.mark.browser, pytest.mark.worker, pytest.mark.django_db(transaction=True)]

# Each tries to leave a mark: in its own document, in the portal's page around it, or as a dialog.
HOSTILE = (
    "<script>document.body.insertAdjacentHTML('beforeend', '<p>script ran</p>');"
    "try { parent.document.body.dataset.pwned = 'script'; } catch (e) {} alert('script');</script>"
    "<img src=x onerror=\"document.body.insertAdjacentHTML('beforeend', '<p>handler ran</p>');"
    "parent.document.body.dataset.pwned = 'handler'\">"
    "<b>bold from the notebook</b>"
)


def _notebook() -> bytes:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    params = nbformat.v4.new_code_cell("lr = 0.1  # learning rate\nepochs = 2")
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell(
        "from IPython.display import HTML, display\n"
        f"display(HTML({HOSTILE!r}))\n"
        "print(f'result={lr * epochs}')")]
    return nbformat.writes(nb).encode()


def test_a_notebook_uploaded_in_the_form_runs_and_its_scripted_output_runs_nowhere(
        page, new_page, live_server, local_site, live_worker, tmp_path, shots):
    from portal.jobs.models import Job, JobState

    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    path = tmp_path / "analysis.ipynb"
    path.write_bytes(_notebook())

    log_in(page, live_server.url, "alice")
    open_new_job_form(page)
    job_form_field(page, "Hardware").select_option(str(local_site.hardware.pk))
    job_form_field(page, "Name").fill("notebook-in-browser")
    job_form_field(page, "Notebook").set_input_files(str(path))
    # The parameters cell as written, and an input per parameter holding its value.
    expect(page.locator("#parameters-cell")).to_contain_text("lr = 0.1  # learning rate")
    expect(job_form_field(page, "lr")).to_have_value("0.1")
    expect(job_form_field(page, "epochs")).to_have_value("2")
    job_form_field(page, "lr").fill("0.5")
    job_form_field(page, "epochs").fill("3")
    expect(page.locator("#payload-preview")).to_contain_text("python -m papermill notebook.ipynb")
    shots(page, "form-with-notebook")
    page.get_by_role("button", name="Run").click()

    expect(page).to_have_url(re.compile(r"/jobs/\d+/$"))
    job = Job.objects.get()
    assert job.parameters == {"lr": 0.5, "epochs": 3}
    frame = page.frame_locator("#notebook-frame")
    expect(frame.get_by_text("result=1.5")).to_be_visible(timeout=120_000)
    assert Job.objects.get().state == JobState.COMPLETED
    expect(page.locator("#executed-notebook")).to_contain_text("lr=0.5")
    expect(frame.get_by_text("bold from the notebook", exact=True)).to_be_visible()  # the HTML output is shown...
    expect(frame.get_by_text("lr = 0.5")).to_be_visible()  # ...with papermill's injected parameters
    expect(frame.get_by_text("script ran", exact=True)).to_have_count(0)  # ...but none of its script ran
    expect(frame.get_by_text("handler ran", exact=True)).to_have_count(0)
    assert page.evaluate("document.body.dataset.pwned") is None
    shots(page, "job-page-with-executed-notebook")

    # In a tab of its own the page is still a sandbox: its response's policy, not only the frame's attribute.
    own = new_page()
    own.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    log_in(own, live_server.url, "alice")
    response = own.goto(f"{live_server.url}/jobs/{job.pk}/notebook/")
    assert response.headers["content-security-policy"].startswith("sandbox;")
    expect(own.get_by_text("bold from the notebook", exact=True)).to_be_visible()
    own.wait_for_timeout(500)
    expect(own.get_by_text("script ran", exact=True)).to_have_count(0)
    expect(own.get_by_text("handler ran", exact=True)).to_have_count(0)
    assert dialogs == []

    # The .ipynb downloads as it came back from papermill.
    with page.expect_download() as download:
        page.get_by_role("link", name="Download notebook.ipynb").click()
    executed = json.loads(open(download.value.path()).read())
    assert executed["metadata"]["papermill"]["parameters"] == {"lr": 0.5, "epochs": 3}
