"""From JupyterLab on the hub to the test cluster: alice presses "Submit notebook as job", picks the "1 GPU" preset
and the PyTorch modules, submits; the notebook runs with papermill on the loopback Slurm as alice's own cluster
account, and its executed notebook opens in Lab. bob, on the same hub, does not see it.

(tests/hub/test_hub_browser.py walks the same dialog in full on the local backend; this one is about where it runs.)
"""

from __future__ import annotations

import json
import re

import pytest
from playwright.sync_api import expect

from tests.hub.conftest import notebook
from tests.hub.test_hub_browser import LAB_TIMEOUT, hub_login

pytestmark = [pytest.mark.hub, pytest.mark.browser, pytest.mark.cluster, pytest.mark.worker,
              pytest.mark.django_db(transaction=True)]

TORCH = "PyTorch 2.13 + papermill (modules)"


@pytest.fixture
def hub_on_cluster(hub_portal, cluster_keys, test_cluster):
    """hub_portal with the loopback Slurm registered for project "vision" and alice's account on it (bob has none
    and is not in the project)."""
    from portal.clusters.models import Allocation, ClusterAccount
    from portal.dev.loopback import register_clusters

    clusters = register_clusters(test_cluster, hub_portal.project)
    # Slurm only, so that the "1 GPU" preset resolves to its A100 slice (the plain Grid Engine's slots are cheaper).
    Allocation.objects.filter(project=hub_portal.project).exclude(cluster__slug__in=["local", "slurm-test"]).delete()
    private, public = cluster_keys["alice"]
    account = ClusterAccount(cluster=clusters["slurm-test"], user=hub_portal.alice, username="alice", public_key=public)
    account.set_private_key(private)
    account.save()
    return hub_portal


def test_a_notebook_submitted_from_lab_with_a_preset_runs_on_the_test_clusters_slurm(
        new_page, hub_on_cluster, live_server, live_worker):
    from portal.jobs.models import Job, JobState

    hub = hub_on_cluster.hub
    (hub.home("alice") / "cluster.ipynb").write_text(json.dumps(notebook(
        "import socket, os\nprint(f'result={lr * epochs}')\nprint('slurm job', os.environ.get('SLURM_JOB_ID'))")))
    hub.start_server("alice", hub.token("alice"))
    page = new_page()
    hub_login(page, hub.url, "alice")
    # ?reset: a fresh workspace, so the notebook in front is cluster.ipynb and not a tab an earlier test left open
    # in alice's (session-long) Lab, such as an executed notebook it opened.
    page.goto(f"{hub.url}/user/alice/lab/tree/cluster.ipynb?reset", timeout=LAB_TIMEOUT)
    page.get_by_role("button", name="Submit notebook as job").click()
    dialog = page.get_by_role("dialog")
    expect(dialog.get_by_label("Project")).to_have_value("vision")
    dialog.get_by_label("Software").select_option(label=TORCH)  # the name already says its kind
    dialog.get_by_label("Hardware").select_option(value="preset:1-gpu")
    expect(dialog.get_by_label("Hardware").locator("option:checked")).to_contain_text("1 GPU — ")
    dialog.get_by_label("Walltime").fill("10m")
    dialog.get_by_label("lr").fill("0.5")
    dialog.get_by_label("epochs").fill("6")
    expect(dialog.get_by_role("status").first).to_contain_text("Estimate:", timeout=30_000)
    dialog.get_by_role("button", name="Submit").click()
    expect(dialog.get_by_role("link", name=re.compile(r"^Open job \d+ in Kakehashi$"))).to_be_visible()
    expect(dialog.get_by_text("Submitted cluster.ipynb as job")).to_be_visible()

    job = Job.objects.get()
    assert (job.user, job.cluster.slug, job.hardware.slug) == (hub_on_cluster.alice, "slurm-test", "slurm-a100x1")
    assert job.parameters == {"lr": 0.5, "epochs": 6}
    open_executed = dialog.get_by_role("button", name="Open executed notebook")
    expect(open_executed).to_be_visible(timeout=180_000)
    job.refresh_from_db()
    assert job.state == JobState.COMPLETED and job.scheduler_id.isdigit(), (job.state, job.state_reason)
    open_executed.click()
    expect(page.locator(".jp-NotebookPanel:visible .jp-OutputArea-output").get_by_text("result=3.0")).to_be_visible(
        timeout=30_000)
    expect(page.locator(".jp-NotebookPanel:visible .jp-OutputArea-output").get_by_text(
        f"slurm job {job.scheduler_id}")).to_be_visible()

    bob = new_page()
    hub_login(bob, hub.url, "bob")
    bob.goto(f"{hub.url}/services/kakehashi/jobs/{job.pk}/")
    expect(bob.get_by_role("heading", level=1)).to_have_text("Not found")
