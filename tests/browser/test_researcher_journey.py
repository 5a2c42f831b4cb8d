"""A researcher, in a real browser, runs jobs on the REAL loopback schedulers and watches them live.

The portal is live_server; a real Celery worker with beat (live_worker) dispatches and tracks on the same test
database; the jobs go over SSH to the test cluster's Slurm and TSUBAME-style Grid Engine.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.browser.a11y import assert_no_violations
from tests.browser.conftest import (
    job_form_field,
    log_in,
    open_new_job_form,
    seen_job_states,
    watch_job_states,
)

pytestmark = [pytest.mark.browser, pytest.mark.cluster, pytest.mark.worker, pytest.mark.django_db(transaction=True)]

TORCH = "PyTorch 2.13 + papermill (modules)"
# One line, as typed: long enough that the page, polling every 2 s, sees the job running (tracking runs every
# second here). A multi-line script reaches the cluster with CRLF line ends: see test_job_form.py.
SCRIPT = 'echo "visible=$CUDA_VISIBLE_DEVICES torch env=${KAKEHASHI_TORCH_ENV:-none}"; sleep 8; echo "done on $(hostname)"'


def _slurm_and_tsubame_only(site):
    """Project "vision" keeps its Slurm and TSUBAME allocations only. With every loopback cluster allocated,
    "Run on 8×A100" would rightly pick the cheapest match, the plain Grid Engine's 8-GPU slots (2 points/node-h)."""
    from portal.clusters.models import Allocation

    Allocation.objects.filter(project=site.project).exclude(cluster__slug__in=["local", "slurm-test", "sge-tsubame-test"]).delete()


def test_run_on_8_a100_on_slurm_and_watch_it_live(page, live_server, hpc_site, live_worker, shots):
    from portal.catalog.models import HardwareType, Software
    from portal.jobs.models import Job, JobState

    _slurm_and_tsubame_only(hpc_site)
    a100x8 = HardwareType.objects.get(slug="slurm-a100x8")
    torch = Software.objects.get(name=TORCH)
    base = live_server.url

    # Log in through allauth's page, typing like a person.
    page.goto(base + "/")
    expect(page).to_have_url(re.compile(r"/accounts/login/\?next=/$"))
    page.get_by_label(re.compile("^Login")).fill("alice")
    page.get_by_label(re.compile("^Password")).fill("pw-for-tests-123")
    shots(page, "login")
    page.get_by_role("button", name="Sign In", exact=True).click()  # not "Sign in with a passkey"
    expect(page.get_by_role("heading", level=1)).to_have_text("Welcome, alice")
    shots(page, "dashboard")

    # New job → the "Run on 8×A100" preset fills the hardware with the Slurm A100 node.
    open_new_job_form(page)
    preset = page.get_by_role("button", name=re.compile("Run on 8×A100"))
    expect(preset).to_contain_text("Slurm (test cluster)")
    preset.click()
    expect(preset).to_have_attribute("aria-pressed", "true")
    expect(job_form_field(page, "Hardware")).to_have_value(str(a100x8.pk))
    expect(job_form_field(page, "Nodes")).to_have_value("1")
    job_form_field(page, "Software").select_option(label=TORCH)
    job_form_field(page, "Name").fill("eight-gpus")
    job_form_field(page, "Script").fill(SCRIPT)

    # The preview follows the form: the exact Slurm script with 8 GPUs, the modules, and the estimate.
    preview = page.locator("#script-preview")
    expect(preview).to_contain_text("#SBATCH --gres=gpu:a100:8")
    expect(preview).to_contain_text("#SBATCH --account=kkdemo")
    expect(preview).to_contain_text("eight-gpus")
    expect(preview).to_contain_text("module load pytorch/2.13")
    expect(page.locator("#estimate-amount")).to_have_text("3.00 points")  # 1 node × 3 points/node-h × 1 h
    expect(page.locator("#estimate")).to_contain_text("97.00 points left after this job")
    shots(page, "form-with-preview")
    page.evaluate("window.scrollTo(0, 0)")
    shots(page, "form-with-preview-top", full_page=False)  # the part docs/screenshots shows
    previewed = preview.inner_text()

    page.get_by_role("button", name="Run", exact=True).click()
    expect(page).to_have_url(re.compile(r"/jobs/\d+/$"))
    job = Job.objects.get(name="eight-gpus")
    assert job.rendered_script.strip() == previewed.strip()  # what was previewed is what was submitted
    submitted = page.get_by_role("alert").filter(has_text="You submitted job eight-gpus to Slurm (test cluster).")
    expect(submitted).to_be_visible()
    shots(page, "queued")

    # Without reloading, the badge follows the job: running, then completed.
    watch_job_states(page)
    badge = page.locator("#job-state [data-state]")
    expect(badge).to_have_attribute("data-state", "running", timeout=90_000)
    expect(badge).to_have_text("Running")
    expect(page.locator("#job-announcer")).to_have_text("The job is now running.")  # said once to screen readers
    expect(page.locator("#scheduler-id")).to_have_text(re.compile(r"^\d+$"))
    shots(page, "running")
    expect(badge).to_have_attribute("data-state", "completed", timeout=90_000)
    expect(badge).to_have_text("Completed")
    expect(page.locator("#job-announcer")).to_have_text("The job is now completed.")
    states = seen_job_states(page)
    assert states.index("running") < states.index("completed"), states
    assert states[-1] == "completed", states

    # The output, read in the stdout tab, and the settled cost in the status card.
    page.get_by_role("tab", name="stdout").click()
    stdout = page.locator("#stdout-pane pre.log")
    expect(stdout).to_contain_text("visible=0,1,2,3,4,5,6,7", timeout=30_000)
    expect(stdout).to_contain_text("torch env=/")  # the software's module was loaded
    expect(stdout).to_contain_text("done on ")
    expect(page.locator("#job-exit")).to_have_text("exit code 0")
    expect(page.locator("#job-cost")).to_have_text(re.compile(r"^\s*cost \d+\.\d+ points \(estimate 3\.00\)\s*$"))
    assert seen_job_states(page)[-1] == "completed"  # still the same page: nothing was reloaded
    job.refresh_from_db()
    assert job.state == JobState.COMPLETED and job.cost_amount is not None
    from portal.budgets.templatetags.money import money

    expect(page.locator("#job-cost strong")).to_have_text(f"{money(job.cost_amount)} points")
    # The banner, still there, does not contradict the badge: it says what was done, not a state.
    expect(page.get_by_role("alert").filter(has_text=re.compile(r"queued|pending|running", re.I))).to_have_count(0)
    submitted.get_by_role("button", name="Close").click()
    expect(submitted).to_have_count(0)
    page.mouse.move(0, 0)  # no hover highlight in the screenshot
    shots(page, "completed")
    assert_no_violations(page, "the completed job's page")

    # Clone & edit: the form again, filled from this job.
    page.get_by_role("link", name="Clone & edit").click()
    expect(page).to_have_url(re.compile(rf"/jobs/new/\?clone={job.pk}$"))
    expect(job_form_field(page, "Name")).to_have_value("eight-gpus")
    expect(job_form_field(page, "Hardware")).to_have_value(str(a100x8.pk))
    expect(job_form_field(page, "Software")).to_have_value(str(torch.pk))
    expect(job_form_field(page, "Nodes")).to_have_value("1")
    expect(job_form_field(page, "Walltime")).to_have_value("01:00:00")
    expect(job_form_field(page, "Script")).to_have_value(SCRIPT)
    expect(page.locator("#script-preview")).to_contain_text("#SBATCH --gres=gpu:a100:8")
    shots(page, "clone-and-edit")


def test_tsubame_f_node_times_two_through_the_browser(page, live_server, hpc_site, live_worker, shots):
    from portal.catalog.models import HardwareType
    from portal.jobs.models import Job

    _slurm_and_tsubame_only(hpc_site)
    f_node = HardwareType.objects.get(slug="tsubame-f-node")
    log_in(page, live_server.url, "alice")
    open_new_job_form(page)

    job_form_field(page, "Hardware").select_option(str(f_node.pk))
    job_form_field(page, "Nodes").fill("2")
    job_form_field(page, "Walltime").fill("00:10:00")
    job_form_field(page, "Name").fill("tsubame-two")
    job_form_field(page, "Script").fill('echo "resources=$(qstat -j "$JOB_ID" | grep -E "^hard resource_list")"\n')
    preview = page.locator("#script-preview")
    expect(preview).to_contain_text("#$ -l f_node=2")
    expect(preview).to_contain_text("#$ -l h_rt=0:10:00")
    expect(page.locator("#preview")).to_contain_text("TSUBAME-style Grid Engine (test cluster)")
    expect(page.locator("#estimate-amount")).to_have_text("0.33 points")  # 2 nodes × 1 point/node-h × 10 min
    shots(page, "form-with-preview")
    page.get_by_role("button", name="Run", exact=True).click()
    expect(page).to_have_url(re.compile(r"/jobs/\d+/$"))
    job = Job.objects.get(name="tsubame-two")
    assert job.cluster.slug == "sge-tsubame-test"

    # The worker submits it; the page shows Grid Engine's job id, then the job completes.
    watch_job_states(page)
    expect(page.locator("#scheduler-id")).to_have_text(re.compile(r"^\d+$"), timeout=60_000)
    shots(page, "submitted")
    page.get_by_text("Show the submitted script").click()
    expect(page.locator("#script-title").locator("..").locator("pre").first).to_contain_text("#$ -l f_node=2")
    badge = page.locator("#job-state [data-state]")
    expect(badge).to_have_attribute("data-state", "completed", timeout=90_000)
    expect(page.locator("#stdout-pane pre.log")).to_contain_text("f_node=2", timeout=30_000)
    expect(page.locator("#job-cost")).to_contain_text("cost")
    job.refresh_from_db()
    expect(page.locator("#scheduler-id")).to_have_text(job.scheduler_id)
    assert seen_job_states(page)[-1] == "completed"
    shots(page, "completed")


def test_a_sweep_on_slurm_is_previewed_as_one_array_and_its_points_end_on_the_sweep_page(page, live_server, hpc_site,
                                                                                        live_worker, shots):
    from portal.catalog.models import HardwareType
    from portal.jobs.models import JobGroup

    log_in(page, live_server.url, "alice")
    open_new_job_form(page)
    job_form_field(page, "Hardware").select_option(str(HardwareType.objects.get(slug="slurm-a100x1").pk))
    job_form_field(page, "Name").fill("lr-sweep")
    job_form_field(page, "Script").fill('echo "lr=$LR"')
    job_form_field(page, "Parameter sweep").fill("LR=0.1,0.2,0.3")

    preview = page.locator("#script-preview")
    expect(preview).to_contain_text("#SBATCH --array=1-3")
    expect(preview).to_contain_text("3) export LR=0.3 ;;")
    expect(page.locator("#sweep-note")).to_contain_text("one scheduler array")
    expect(page.locator("#estimate-amount")).to_have_text("1.50 points")  # 3 × 1 node × 0.5 points/node-h × 1 h
    # The comparison before Run is for one point's shape (every point has it); the estimate above is for all three.
    expect(page.locator("#places-title")).to_have_text(re.compile(r"^Where each of its 3 points \(1×A100, 1 h\) can run$"))
    expect(page.locator("#places-table thead")).to_contain_text("Cost of a point")
    expect(page.locator("#places-table tbody tr.table-active")).to_contain_text("0.50 points")
    shots(page, "sweep-preview")
    previewed = preview.inner_text()

    page.get_by_role("button", name="Run", exact=True).click()
    expect(page).to_have_url(re.compile(r"/jobs/groups/\d+/$"))
    group = JobGroup.objects.get(name="lr-sweep")
    assert {job.rendered_script.strip() for job in group.jobs.all()} == {previewed.strip()}
    expect(page.get_by_role("alert").filter(has_text="You submitted sweep lr-sweep: 3 jobs as one scheduler array.")
           ).to_be_visible()
    # Without reloading, the page shows the array's id, each element's own id, and all three completing.
    expect(page.locator("#group-array")).to_have_text(re.compile(r"^array \d+$"), timeout=60_000)
    expect(page.locator("#group-counts")).to_have_text(re.compile(r"Completed:\s*3"), timeout=90_000)
    array_id = JobGroup.objects.get(pk=group.pk).scheduler_id
    for index in (1, 2, 3):
        expect(page.locator("#group-table")).to_contain_text(f"{array_id}_{index}")
    shots(page, "sweep-completed")
