"""The Lab dialog as a researcher meets it, in Chromium on the real hub: a refusal stays in view until something
changes, the dialog fits the window, software that runs a notebook is chosen by default (and "None" on a
scheduler is refused before submit, naming the software that would do), and the files beside the notebook travel
with it, listed and bounded in the dialog."""

from __future__ import annotations

import json
import re

import pytest
from playwright.sync_api import expect

from tests.hub.conftest import notebook
from tests.hub.test_hub_browser import LAB_TIMEOUT, hub_login

pytestmark = [pytest.mark.hub, pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _open_dialog(page, hub, path: str):
    hub.start_server("alice", hub.token("alice"))
    hub_login(page, hub.url, "alice")
    # ?reset: a fresh workspace, so the notebook in front is `path`, not a tab an earlier test left open in
    # alice's (session-long) Lab: the dialog acts on the notebook in front.
    page.goto(f"{hub.url}/user/alice/lab/tree/{path}?reset", timeout=LAB_TIMEOUT)
    button = page.get_by_role("button", name="Submit notebook as job")
    expect(button).to_be_visible(timeout=LAB_TIMEOUT)
    button.click()
    dialog = page.get_by_role("dialog")
    expect(dialog.get_by_label("Project")).to_have_value("vision")
    return dialog


def _choose(select, prefix: str) -> None:
    """Choose the option whose label starts with `prefix` (labels end with prices that may change), once the dialog
    has it: the options arrive from the portal after the project is chosen, as a person would wait for them."""
    option = select.locator("option").filter(has_text=re.compile("^" + re.escape(prefix)))
    expect(option).not_to_have_count(0)
    select.select_option(label=option.first.text_content())


def _in_view(page, locator) -> bool:
    box, height = locator.bounding_box(), page.viewport_size["height"]
    return box is not None and box["y"] >= 0 and box["y"] + box["height"] <= height


def test_a_refusal_stays_in_view_until_something_changes_and_software_that_runs_notebooks_is_the_default(
        new_page, hub_portal, shots):
    from portal.catalog.models import HardwareType, Software
    from portal.clusters.models import Allocation, Cluster, Kind
    from portal.jobs.models import Job

    hub = hub_portal.hub
    slurm = Cluster.objects.create(slug="slurm", name="Slurm lab", kind=Kind.SLURM, login_host="slurm", host_keys="x")
    Allocation.objects.create(project=hub_portal.project, cluster=slurm, group="kk")
    HardwareType.objects.create(cluster=slurm, slug="slurm-cpu", name="Slurm CPU", cpus_per_node=4, max_nodes=1,
                                max_walltime_hours=24, rate=1, rate_unit="points")
    torch = Software.objects.create(slug="pytorch", name="PyTorch 2.13 + papermill (modules)", kind="modules",
                                    modules=["pytorch/2.13"], provides=["torch", "papermill"])
    torch.clusters.add(slurm)
    # A notebook with many parameters: the dialog is taller than the window.
    params = "\n".join(f"p{i} = {i}" for i in range(30))
    folder = hub.home("alice") / "tall"
    folder.mkdir(exist_ok=True)
    (folder / "tall.ipynb").write_text(json.dumps(notebook(source="print(p0)", parameters=params)))
    page = new_page()
    page.set_viewport_size({"width": 1280, "height": 700})
    dialog = _open_dialog(page, hub, "tall/tall.ipynb")

    # Labels say the kind once; on the Slurm CPU node, the software that runs notebooks is chosen.
    software = dialog.get_by_label("Software")
    expect(software.locator("option", has_text="PyTorch 2.13 + papermill (modules)")).to_have_count(1)
    expect(software.locator("option", has_text="(modules) (modules)")).to_have_count(0)
    _choose(dialog.get_by_label("Hardware"), "Slurm CPU (slurm)")
    expect(software).to_have_value("pytorch")
    # "None" there is refused by the estimate, naming the software that would do.
    software.select_option(label="None (the cluster default environment)")
    alert = dialog.get_by_role("alert")
    expect(alert).to_contain_text("a notebook runs with papermill and its kernel 'python3' inside software: choose one "
                                  "that provides them on Slurm lab: PyTorch 2.13 + papermill (modules)", timeout=30_000)
    assert _in_view(page, alert)

    # Back on the local CPU: a walltime the strict budget cannot cover, typed, then Submit at once.
    _choose(dialog.get_by_label("Hardware"), "Local CPU (local)")
    dialog.get_by_label("Walltime").fill("11h")
    dialog.get_by_role("button", name="Submit").click()
    expect(alert).to_contain_text("budget", timeout=30_000)
    refusal = alert.text_content()
    page.wait_for_timeout(2000)  # the estimate the edit set off has answered by now: the refusal is still there
    expect(alert).to_have_text(refusal)
    assert _in_view(page, alert), "the refusal is below the window"
    content = dialog.locator(".jp-Dialog-content")
    assert content.bounding_box()["height"] <= 700
    assert _in_view(page, dialog.get_by_role("button", name="Submit"))
    shots(page, "refusal-in-view", full_page=False)
    assert not Job.objects.exists()

    # Something changes: the refusal goes, the estimate speaks again.
    dialog.get_by_label("Walltime").fill("30m")
    expect(dialog.locator(".kk-outcome .kk-error")).to_have_text("")
    expect(dialog.get_by_role("status").first).to_contain_text("Estimate: 5.00 points", timeout=30_000)


@pytest.mark.worker
def test_the_files_beside_the_notebook_travel_with_it_listed_and_bounded_in_the_dialog(
        new_page, hub_portal, live_worker, shots):
    from portal.jobs.models import Job

    hub = hub_portal.hub
    folder = hub.home("alice") / "study"
    (folder / "data").mkdir(parents=True, exist_ok=True)
    (folder / "utils.py").write_text("def answer():\n    return 42\n")
    (folder / "data" / "labels.csv").write_text("cat,1\ndog,2\nbird,3\n")
    (folder / "big.bin").write_bytes(b"\0" * (9 * 1024 * 1024))  # over the 8 MiB bound: not chosen
    source = ("import csv, utils\nrows = list(csv.reader(open('data/labels.csv')))\n"
              "print(f'answer={utils.answer()} rows={len(rows)}')")
    (folder / "study.ipynb").write_text(json.dumps(notebook(source=source)))
    page = new_page()
    dialog = _open_dialog(page, hub, "study/study.ipynb")

    files = dialog.get_by_role("group", name="Files sent with the notebook")
    expect(files.get_by_label("utils.py (28 B)")).to_be_checked()
    expect(files.get_by_label("data/labels.csv (19 B)")).to_be_checked()
    expect(files.get_by_label("big.bin (9.0 MiB)")).not_to_be_checked()
    expect(files).to_contain_text("2 file(s), 47 B, go next to the notebook on the cluster (at most 50 files, 8.0 MiB).")
    files.get_by_label("big.bin (9.0 MiB)").check()
    expect(files).to_contain_text("Too many: choose fewer, or name larger data as a dataset.")
    files.get_by_label("big.bin (9.0 MiB)").uncheck()
    shots(page, "files-beside", full_page=False)

    _choose(dialog.get_by_label("Hardware"), "Local CPU (local)")
    expect(dialog.locator(".kk-estimate")).to_contain_text("Estimate:", timeout=30_000)
    dialog.get_by_role("button", name="Submit").click()
    state = dialog.locator(".kk-state")
    expect(state).to_have_attribute("data-state", "completed", timeout=120_000)
    job = Job.objects.get()
    assert sorted(job.notebook["metadata"]["kakehashi"]["files"]) == ["data/labels.csv", "utils.py"]
    dialog.get_by_role("button", name="Open executed notebook").click(timeout=90_000)
    expect(page.locator(".jp-NotebookPanel:visible .jp-OutputArea-output").get_by_text("answer=42 rows=3")).to_be_visible(
        timeout=30_000)
