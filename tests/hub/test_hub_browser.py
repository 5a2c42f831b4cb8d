"""In a real browser: a researcher on the hub opens the portal without a second password, and submits the notebook
open in JupyterLab as a job, follows it to the end and opens the executed notebook in Lab.

Everything is real: JupyterHub with configurable-http-proxy, alice's JupyterLab server with the kakehashi-lab
extension as installed from the repository, the portal (live_server) with a Celery worker (live_worker) running the
notebook with papermill on the local backend, headless Chromium.
"""

from __future__ import annotations

import json
import re

import pytest
from playwright.sync_api import Page, expect
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

from tests.hub.conftest import HUB_PASSWORD, notebook

pytestmark = [pytest.mark.hub, pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LAB_TIMEOUT = 60_000  # Lab's first load (its bundles, a kernel) is slow on a busy 2-core machine


def hub_login(page: Page, hub_url: str, user: str) -> None:
    page.goto(f"{hub_url}/hub/login?next=/hub/home")
    page.get_by_label("Username").fill(user)
    page.get_by_label("Password").fill(HUB_PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(re.compile(r"/hub/home$"))


def open_portal_from_hub(page: Page) -> None:
    """The hub's own navigation: Services → kakehashi."""
    page.get_by_role("button", name="Services").or_(page.get_by_role("link", name="Services")).click()
    page.get_by_role("link", name="kakehashi").click()


def test_a_hub_user_opens_the_portal_from_the_hub_and_is_signed_in_without_a_password(page, hub_portal, live_server,
                                                                                       shots):
    hub_login(page, hub_portal.hub.url, "alice")
    shots(page, "hub-home")
    open_portal_from_hub(page)
    # The hub's OAuth signed alice in to her own portal account: no portal login page on the way.
    expect(page).to_have_url(live_server.url + "/")
    expect(page.get_by_role("heading", level=1)).to_have_text("Welcome, alice")
    expect(page.get_by_role("navigation", name="Main navigation")).to_contain_text("alice")
    expect(page.get_by_text("Vision lab").first).to_be_visible()
    shots(page, "portal-as-alice")

    from portal.audit.models import AuditEntry

    assert AuditEntry.objects.filter(action="hub.login", actor=hub_portal.alice,
                                     data__hub_user="alice", data__matched_by="same name").exists()


def test_a_hub_user_without_a_portal_account_gets_a_page_that_says_so(page, hub_portal, shots):
    from django.contrib.auth import get_user_model

    hub_login(page, hub_portal.hub.url, "carol")
    open_portal_from_hub(page)
    expect(page.get_by_role("heading", level=1)).to_have_text("No Kakehashi account for carol")
    expect(page.get_by_text("Kakehashi has no account for this hub user")).to_be_visible()
    expect(page.get_by_role("link", name="Back to JupyterHub")).to_have_attribute(
        "href", f"{hub_portal.hub.url}/hub/home")
    expect(page.get_by_role("navigation", name="Main navigation")).not_to_contain_text("carol")
    shots(page, "no-account")
    assert not get_user_model().objects.filter(username="carol").exists()

    from portal.audit.models import AuditEntry

    assert AuditEntry.objects.filter(action="hub.login_refused", data__hub_user="carol").exists()


def run_from_command_palette(page: Page, command: str, attempts: int = 4) -> None:
    """View → Command Palette, type the command, click it. Lab may still take the focus back to the notebook after
    its kernel reports idle (a late kernel-info reply, a settings load), which hides the palette: a hidden palette is
    opened again, a bounded number of times."""
    palette_input = page.locator(".lm-CommandPalette-input")
    for attempt in range(attempts):
        page.get_by_role("menuitem", name="View").click()
        page.get_by_role("menuitem", name=re.compile("Command Palette")).click()
        try:
            palette_input.fill(command[:15], timeout=5_000)
            page.locator(".lm-CommandPalette-item").get_by_text(command).click(timeout=5_000)
            return
        except PlaywrightTimeoutError:
            if attempt == attempts - 1:
                raise


@pytest.mark.worker
def test_submit_the_open_notebook_as_a_job_from_lab_follow_it_and_open_the_executed_notebook(
        new_page, hub_portal, live_server, live_worker, shots):
    from portal.jobs.models import Job, JobState

    hub = hub_portal.hub
    (hub.home("alice") / "analysis.ipynb").write_text(json.dumps(notebook()))
    hub.start_server("alice", hub.token("alice"))
    page = new_page()
    hub_login(page, hub.url, "alice")
    # ?reset: a fresh workspace. Without it Lab restores the tabs an earlier test of the hub's left open (study.ipynb)
    # after it has shown this one: the restored tab comes to the front, takes the focus from the command palette and
    # hides this notebook's toolbar (both seen in CI runs).
    page.goto(f"{hub.url}/user/alice/lab/tree/analysis.ipynb?reset", timeout=LAB_TIMEOUT)
    button = page.get_by_role("button", name="Submit notebook as job")
    expect(button).to_be_visible(timeout=LAB_TIMEOUT)
    # Lab's news and update pop-ups are off (jupyterhub/lab-settings/overrides.json).
    expect(page.get_by_text("Would you like to receive official Jupyter news?")).to_have_count(0)
    shots(page, "lab-notebook", full_page=False)

    # The command palette has it too, and it opens the same dialog. (Once the kernel is idle: while it starts, Lab
    # moves the focus back to the notebook, which closes the palette.)
    expect(page.locator(".jp-StatusBar-Widget").get_by_text(re.compile(r"Idle"))).to_be_visible(timeout=LAB_TIMEOUT)
    run_from_command_palette(page, "Submit notebook as job")
    dialog = page.get_by_role("dialog")
    expect(dialog.get_by_label("Project")).to_have_value("vision")
    dialog.get_by_role("button", name="Close").click()
    expect(dialog).to_have_count(0)

    button.click()
    expect(dialog.get_by_text("Submit notebook as job").first).to_be_visible()
    expect(dialog.get_by_label("Project")).to_have_value("vision")
    expect(dialog.get_by_label("Job name")).to_have_value("analysis")
    expect(dialog.get_by_label("lr")).to_have_value("0.1")
    dialog.get_by_label("Hardware").select_option(label="CPU only — local-cpu · 10.00 points/node-h")
    dialog.get_by_label("Walltime").fill("30m")
    dialog.get_by_label("lr").fill("0.5")
    dialog.get_by_label("epochs").fill("3")
    # The portal's dry run: 0.5 node-hours at 10 points, out of the project's 100, shown as the portal's pages show
    # money (the API's `text`: one rule everywhere, two decimals or more). (The portal's first notebook
    # check in a process imports jsonschema, whose format checkers compile grammars for seconds when the hub's
    # packages share the environment, as they do here.)
    estimate = dialog.get_by_role("status").first
    expect(estimate).to_have_text("Estimate: 5.00 points. Budget left: 100.00 points, 95.00 points after this job.",
                                  timeout=30_000)
    shots(page, "dialog-estimate", full_page=False)

    dialog.get_by_role("button", name="Submit").click()
    link = dialog.get_by_role("link", name=re.compile(r"^Open job \d+ in Kakehashi$"))
    expect(link).to_be_visible()
    job = Job.objects.get()
    assert (job.user, job.project, job.parameters) == (hub_portal.alice, hub_portal.project, {"lr": 0.5, "epochs": 3})
    expect(link).to_have_attribute("href", f"/services/kakehashi/jobs/{job.pk}/")
    state = dialog.locator(".kk-state")
    expect(state).to_have_attribute("data-state", "completed", timeout=120_000)
    open_executed = dialog.get_by_role("button", name="Open executed notebook")
    expect(open_executed).to_be_visible(timeout=90_000)
    expect(state).to_contain_text(f"Job {job.pk} is completed")
    shots(page, "dialog-completed", full_page=False)
    assert Job.objects.get().state == JobState.COMPLETED

    # The job's link leads, through the hub's sign-in, to its page in the portal.
    with page.expect_popup() as popup:
        link.click()
    job_page = popup.value
    expect(job_page).to_have_url(f"{live_server.url}/jobs/{job.pk}/")
    expect(job_page.locator("#job-state [data-state]")).to_have_attribute("data-state", "completed")
    shots(job_page, "job-page-in-portal")
    job_page.close()

    open_executed.click()
    executed = f"analysis.kakehashi-{job.pk}.ipynb"
    expect(page.get_by_role("tab", name=re.compile(re.escape(executed)))).to_be_visible(timeout=30_000)
    expect(page.locator(".jp-NotebookPanel:visible .jp-OutputArea-output").get_by_text("result=1.5")).to_be_visible()
    shots(page, "executed-notebook-in-lab", full_page=False)
    assert (hub.home("alice") / executed).exists()

    # bob, on the same hub, neither sees the job listed nor reaches its page.
    bob = new_page()
    hub_login(bob, hub.url, "bob")
    bob.goto(f"{hub.url}/services/kakehashi/jobs/{job.pk}/")
    expect(bob).to_have_url(f"{live_server.url}/jobs/{job.pk}/")
    expect(bob.get_by_role("heading", level=1)).to_have_text("Not found")
    bob.goto(f"{live_server.url}/jobs/")
    expect(bob.get_by_role("navigation", name="Main navigation")).to_contain_text("bob")
    expect(bob.get_by_role("main")).not_to_contain_text("analysis")
    shots(bob, "bob-does-not-see-it")
