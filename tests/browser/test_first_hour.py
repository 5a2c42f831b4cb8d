"""A researcher's first hour (issue 12), in a real browser against the real worker and the loopback clusters:
a template picks the software it needs, an edited job script runs with the edit, a notebook job cloned and
edited runs again, a clone says why its hardware is empty, and a site admin's health check runs as the site's
service account."""

from __future__ import annotations

import json
import re

import nbformat
import pytest
from django.core.files.storage import default_storage
from playwright.sync_api import expect

from tests.browser.conftest import job_form_field, log_in, open_new_job_form
from tests.conftest import QUEUE_WAIT, ended_job, job_output, wait_for

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

TORCH = "PyTorch 2.13 + papermill (modules)"


def _story(job) -> str:
    return f"{job_output(job, 'stdout')}\n--- stderr ---\n{job_output(job, 'stderr')}\n--- reason ---\n{job.state_reason}"


def _only_the_pytorch_modules(site):
    """The NGC container provides torch too and comes first by name: keep it to the other project, so the one
    software that fits here is the PyTorch module."""
    from portal.catalog.models import Software

    Software.objects.get(slug="ngc-pytorch-24-05").projects.add(site.other)


@pytest.mark.long
@pytest.mark.cluster
@pytest.mark.worker
def test_picking_the_ddp_template_chooses_pytorch_and_the_training_completes_on_slurm(page, live_server, hpc_site,
                                                                                      live_worker, shots):
    from portal.catalog.models import HardwareType, Software
    from portal.jobs.models import Job, JobState

    _only_the_pytorch_modules(hpc_site)
    a100 = HardwareType.objects.get(slug="slurm-a100x8")
    torch = Software.objects.get(name=TORCH)
    log_in(page, live_server.url, "alice")
    open_new_job_form(page)
    job_form_field(page, "Start from a template").select_option("ddp-mnist")
    page.get_by_role("link", name="Use", exact=True).click()
    expect(page).to_have_url(re.compile(r"template=ddp-mnist"))
    expect(job_form_field(page, "Software")).to_have_value("")  # no hardware yet: nothing to choose from
    job_form_field(page, "Hardware").select_option(str(a100.pk))
    # The template needs torch: the form picks the software that provides it on Slurm.
    expect(job_form_field(page, "Software")).to_have_value(str(torch.pk))
    job_form_field(page, "Processes per node").fill("2")
    job_form_field(page, "Walltime").fill("00:10:00")
    expect(page.locator("#script-preview")).to_contain_text("module load pytorch/2.13")
    expect(page.locator("#script-preview")).to_contain_text("torchrun --nnodes=1 --nproc-per-node=2")
    shots(page, "template-with-software")
    page.get_by_role("button", name="Run", exact=True).click()
    expect(page).to_have_url(re.compile(r"/jobs/\d+/$"))
    job = Job.objects.get(template="ddp-mnist")
    assert job.software == torch
    job = wait_for(lambda: ended_job(job.pk), timeout=QUEUE_WAIT + 180, message="the DDP training")
    assert job.state == JobState.COMPLETED, _story(job)
    assert "world size 2 (cpu, gloo)" in job_output(job, "stdout")
    expect(page.locator("#job-state [data-state]")).to_have_attribute("data-state", "completed", timeout=30_000)
    shots(page, "completed")


def test_a_template_without_software_that_provides_it_is_refused_saying_which_would(page, live_server, hpc_site,
                                                                                     shots):
    from portal.catalog.models import HardwareType, Software
    from portal.jobs.models import Job

    a100 = HardwareType.objects.get(slug="slurm-a100x8")
    log_in(page, live_server.url, "alice", next_path="/jobs/new/?template=gpu-health")
    job_form_field(page, "Hardware").select_option(str(a100.pk))
    expect(job_form_field(page, "Software")).not_to_have_value("")
    # Someone sets it back to plain shell: the preview and Run say why that cannot run.
    job_form_field(page, "Software").select_option(label="None (plain shell)")
    expect(page.locator("#preview")).to_contain_text("template gpu-health needs torch")
    page.get_by_role("button", name="Run", exact=True).click()
    message = page.locator(".kk-field:has(#id_software) .invalid-feedback")
    expect(message).to_contain_text("template gpu-health needs torch: choose Software that provides it")
    expect(message).to_contain_text(TORCH)
    # Software that lacks torch is refused too.
    job_form_field(page, "Software").select_option(str(Software.objects.get(slug="cuda-12-4").pk))
    page.get_by_role("button", name="Run", exact=True).click()
    expect(message).to_contain_text("which CUDA 12.4 + Python 3.11 (modules) does not provide")
    shots(page, "refused")
    assert Job.objects.count() == 0


@pytest.mark.worker
def test_an_edited_job_script_typed_in_the_browser_runs_with_the_edit(page, live_server, local_site, live_worker, shots):
    from portal.jobs.models import Job, JobState

    log_in(page, live_server.url, "alice")
    open_new_job_form(page)
    job_form_field(page, "Hardware").select_option(str(local_site.hardware.pk))
    job_form_field(page, "Name").fill("edited")
    job_form_field(page, "Script").fill('echo "payload ran"')
    expect(page.locator("#script-preview")).to_contain_text('bash "$KAKEHASHI_JOB_DIR/payload.sh"')
    page.locator("#advanced summary").click()
    page.get_by_role("button", name="Copy the preview here").click()
    editor = page.get_by_label("Edited job script")
    copied = editor.input_value()
    assert 'echo "== start $(date -Is) =="' in copied
    # A person edits one line of the multi-line script; the browser sends it back with CRLF line ends.
    editor.fill(copied.replace('echo "== start $(date -Is) =="', 'echo "== start, edited in the browser =="'))
    shots(page, "edited")
    page.get_by_role("button", name="Run", exact=True).click()
    expect(page).to_have_url(re.compile(r"/jobs/\d+/$"))
    job = Job.objects.get(name="edited")
    assert "\r" not in job.rendered_script and "edited in the browser" in job.rendered_script
    job = wait_for(lambda: ended_job(job.pk), timeout=60, message="the edited job")
    assert job.state == JobState.COMPLETED, _story(job)
    stdout = job_output(job, "stdout")
    assert "== start, edited in the browser ==" in stdout and "payload ran" in stdout
    page.get_by_role("tab", name="stdout").click()
    expect(page.locator("#stdout-pane pre.log")).to_contain_text("edited in the browser", timeout=30_000)
    shots(page, "ran-with-the-edit")


def _notebook() -> dict:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    params = nbformat.v4.new_code_cell("lr = 0.1\nepochs = 1")
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell("print(f'result={lr * epochs}')")]
    return json.loads(nbformat.writes(nb))


def _executed(job) -> nbformat.NotebookNode:
    from portal.jobs.models import Job

    job = wait_for(lambda: Job.objects.filter(pk=job.pk, artifacts__path="notebook.ipynb").first(), timeout=120,
                   message="the executed notebook")
    return job, nbformat.reads(
        default_storage.open(job.artifacts.get(path="notebook.ipynb").stored_name).read().decode(), as_version=4)


@pytest.mark.cluster
@pytest.mark.worker
def test_clone_and_edit_of_a_notebook_job_runs_the_notebook_again_with_the_new_parameters(page, live_server, hpc_site,
                                                                                          live_worker, shots):
    from portal.catalog.models import HardwareType, Software
    from portal.jobs.actions.submit import submit_job
    from portal.jobs.actions.validation import JobRequest
    from portal.jobs.models import Job, JobState

    first = submit_job(hpc_site.alice, JobRequest(
        project=hpc_site.project, name="notebook", notebook=_notebook(), parameters={"lr": 0.5, "epochs": 4},
        hardware=HardwareType.objects.get(slug="slurm-a100x1"), software=Software.objects.get(slug="pytorch-2-13"),
        walltime="00:10:00")).job
    first, _ = _executed(first)
    assert first.state == JobState.COMPLETED, first.state_reason

    log_in(page, live_server.url, "alice", next_path=f"/jobs/{first.pk}/")
    page.get_by_role("link", name="Clone & edit").click()
    # The notebook comes with the clone: its parameters cell, with the first run's values in their inputs.
    expect(page.locator("#parameters-cell")).to_contain_text("lr = 0.1")
    expect(page.locator("#id_param_lr")).to_have_value("0.5")
    expect(page.locator("#id_param_epochs")).to_have_value("4")
    page.locator("#id_param_lr").fill("0.25")
    page.locator("#id_param_epochs").fill("2")
    job_form_field(page, "Name").fill("notebook-again")
    expect(page.locator("#script-preview")).to_contain_text("notebook-again")
    shots(page, "clone-of-a-notebook")
    page.get_by_role("button", name="Run", exact=True).click()
    expect(page).to_have_url(re.compile(r"/jobs/\d+/$"))
    clone = Job.objects.get(name="notebook-again")
    assert clone.kind == Job.Kind.NOTEBOOK and clone.notebook == first.notebook
    clone, executed = _executed(clone)
    assert clone.state == JobState.COMPLETED, _story(clone)
    assert executed.metadata["papermill"]["parameters"] == {"lr": 0.25, "epochs": 2}
    outputs = "".join(o.get("text", "") for cell in executed.cells for o in cell.get("outputs", []))
    assert "result=0.5" in outputs


def test_clone_after_the_cluster_was_revoked_says_why_the_hardware_is_empty(page, live_server, local_site, shots):
    from portal.catalog.models import HardwareType
    from portal.clusters.models import Allocation, Cluster
    from portal.jobs.actions.submit import submit_job
    from portal.jobs.actions.validation import JobRequest

    other = Cluster.objects.create(slug="other", name="Other cluster", kind="local")
    hw = HardwareType.objects.create(cluster=other, slug="other-cpu", name="Other CPU", cpus_per_node=2)
    Allocation.objects.create(project=local_site.project, cluster=other)
    job = submit_job(local_site.alice, JobRequest(
        project=local_site.project, name="before", script="true", hardware=hw)).job
    Allocation.objects.filter(project=local_site.project, cluster=other).delete()

    log_in(page, live_server.url, "alice", next_path=f"/jobs/{job.pk}/")
    page.get_by_role("link", name="Clone & edit").click()
    expect(job_form_field(page, "Hardware")).to_have_value("")
    expect(page.locator("[data-notice=clone]")).to_have_text(
        "Hardware is empty: project vision no longer has access to Other cluster, where Other CPU is. "
        "Choose other hardware.")
    expect(job_form_field(page, "Name")).to_have_value("before")
    shots(page, "clone-says-why")


@pytest.mark.cluster
@pytest.mark.worker
def test_a_site_admin_runs_the_health_check_from_the_site_page_as_the_sites_service_account(
        page, live_server, hpc_site, live_worker, make_user, shots):
    import subprocess

    from portal.catalog.models import HardwareType, Software
    from portal.clusters.models import ClusterAccount
    from portal.dev.loopback import ROOT, install_public_key
    from portal.jobs.models import Job, JobState

    _only_the_pytorch_modules(hpc_site)
    make_user("root", staff=True)
    slurm_a100 = HardwareType.objects.get(slug="slurm-a100x8")
    log_in(page, live_server.url, "root")
    page.goto(live_server.url + "/site/")
    row = page.get_by_role("row").filter(has_text="slurm-a100x8")
    # Before the site has a service account there, the page says what to set up instead of a form it cannot send.
    expect(row).to_contain_text("set up Slurm")
    expect(row.get_by_role("link", name=re.compile("Run health check"))).to_have_count(0)

    # The site sets one up on the site page: carol, in a Slurm account of her own (the harness's add-group.sh), with
    # the key the portal generated installed on the login node, as its admins would, then checked from the page.
    subprocess.run([str(ROOT / "tests/cluster/add-group.sh"), "kkops", "carol"], check=True, capture_output=True)
    setup = page.locator("[data-health-cluster=slurm-test]")
    setup.get_by_label(re.compile("^Service account")).fill("carol")
    setup.get_by_label(re.compile("^Group")).fill("kkops")
    setup.get_by_role("button", name=re.compile("Set up health checks")).click()
    expect(setup).to_contain_text("ready in Site operations as carol, login not checked yet")
    account = ClusterAccount.objects.get(cluster__slug="slurm-test", project__slug="site-ops")
    setup.locator("summary").click()
    expect(setup.locator("[data-public-key]")).to_have_text(account.public_key)
    install_public_key("carol", setup.locator("[data-public-key]").inner_text())
    setup.get_by_role("button", name=re.compile("Check the login")).click()
    wait_for(lambda: ClusterAccount.objects.filter(pk=account.pk, verified_at__isnull=False).exists(), timeout=60,
             message="the worker's check of carol's login")
    page.reload()
    expect(setup).to_contain_text("login checked")
    shots(page, "service-account-set-up")
    page.reload()
    row.get_by_role("link", name=re.compile("Run health check")).click()
    expect(page).to_have_url(re.compile(r"template=gpu-health"))
    expect(job_form_field(page, "Project")).to_have_value(str(account.project.pk))
    expect(job_form_field(page, "Hardware")).to_have_value(str(slurm_a100.pk))
    expect(job_form_field(page, "Software")).to_have_value(str(Software.objects.get(name=TORCH).pk))
    job_form_field(page, "Processes per node").fill("2")
    job_form_field(page, "Walltime").fill("00:10:00")
    expect(page.locator("#script-preview")).to_contain_text("#SBATCH --account=kkops")
    expect(page.locator("#preview")).not_to_contain_text("no account linked")
    shots(page, "health-check-form")
    page.get_by_role("button", name="Run", exact=True).click()
    expect(page).to_have_url(re.compile(r"/jobs/\d+/$"))
    job = Job.objects.get(template="gpu-health")
    assert job.account_username == "carol" and job.project.slug == "site-ops"
    job = wait_for(lambda: ended_job(job.pk), timeout=QUEUE_WAIT + 180, message="the health check")
    assert job.state == JobState.COMPLETED, _story(job)
    slurm_a100 = wait_for(lambda: HardwareType.objects.filter(pk=slurm_a100.pk, measured__has_key="tflops").first(),
                          message="the measurement stored with the hardware")
    assert slurm_a100.measured["job"] == job.pk
    page.goto(live_server.url + "/site/")
    expect(page.get_by_role("row").filter(has_text="slurm-a100x8")).to_contain_text("TFLOP/s/device")
    shots(page, "measured")
