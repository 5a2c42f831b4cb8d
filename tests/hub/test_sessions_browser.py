"""What a researcher does with a session, in Chromium: Sessions → New on the portal (reached from the hub, signed in
without a password), the estimate and the budget left before Start, the wait, Connect, a cell that prints the node
and $SLURM_JOB_ID in JupyterLab on the test cluster's Slurm, Stop; the job ends in accounting and is settled. And
on the hub's own spawn page, a session the strict budget cannot cover is refused with the reason.
"""

from __future__ import annotations

import re

import pytest
import requests
from playwright.sync_api import expect

from tests.conftest import wait_for
from tests.hub.conftest import hub_server
from tests.hub.test_hub_browser import LAB_TIMEOUT, hub_login

pytestmark = [pytest.mark.hub, pytest.mark.browser, pytest.mark.cluster, pytest.mark.worker,
              pytest.mark.django_db(transaction=True)]


def test_start_a_session_on_the_portal_connect_run_a_cell_on_the_slurm_node_and_stop_it(
        new_page, sessions_site, live_server, live_worker):
    from portal.jobs.models import Job, JobState
    from portal.sessions.models import Session

    hub = sessions_site.hub
    page = new_page()
    page.on("dialog", lambda dialog: dialog.accept())  # "Stop this session?"
    hub_login(page, hub.url, "alice")
    page.goto(f"{hub.url}/services/kakehashi/sessions/new/")  # the hub signs alice in to the portal (OAuth)
    expect(page.get_by_role("heading", name="New session")).to_be_visible()
    page.get_by_label("Project").select_option(label="Vision lab")
    page.get_by_label("Software").select_option(label="JupyterLab 4.6 (modules)")
    page.get_by_label("Hardware").select_option(label="A100 slice — Slurm (test cluster)")
    page.get_by_label("Walltime").fill("10m")
    estimate = page.locator("#session-estimate")
    # 0.5 points per node-hour for 10 minutes, out of the strict 100 points left.
    expect(estimate).to_contain_text(re.compile(r"Estimate: 0\.083 points"))
    expect(estimate).to_contain_text(re.compile(r"Budget left: 100\.00 points \(strict\)"))
    page.get_by_role("button", name="Start").click()

    expect(page.get_by_role("heading", name="Sessions")).to_be_visible()
    row = page.locator("#session-list tbody tr").first
    expect(row).to_contain_text("JupyterLab")
    connect = row.get_by_role("link", name="Connect")
    expect(connect).to_be_visible(timeout=180_000)
    session = Session.objects.select_related("job").get()
    job = session.job
    assert job.state == JobState.RUNNING and job.scheduler_id.isdigit()

    with page.expect_popup() as opened:
        connect.click()
    lab = opened.value
    expect(lab).to_have_url(re.compile(rf"/user/alice/{session.server_name}/lab"), timeout=LAB_TIMEOUT)
    run_a_cell_in_lab(lab, hub, session, job)

    page.bring_to_front()
    row.get_by_role("button", name="Stop").click()
    job = wait_for(lambda: Job.objects.filter(pk=job.pk, state=JobState.CANCELLED, cost_amount__isnull=False).first(),
                   timeout=120, message="the session cancelled in Slurm's accounting and settled")
    assert job.events.filter(cause="cancelled_by_owner").exists()
    expect(row).to_contain_text("Cancelled", timeout=30_000)
    expect(row.get_by_role("link", name="Connect")).to_have_count(0)
    wait_for(lambda: hub_server(hub, "alice", session.server_name) is None, timeout=60, message="the hub dropped it")


def test_the_hubs_spawn_page_offers_the_persons_choices_with_the_estimate_and_says_why_a_strict_budget_refuses(
        new_page, sessions_site, live_worker):
    from portal.jobs.models import Job

    hub = sessions_site.hub
    page = new_page()
    hub_login(page, hub.url, "alice")
    page.goto(f"{hub.url}/hub/spawn/alice/big")
    # Her own project, software that provides JupyterLab and the project's hardware, as the portal offers them.
    page.get_by_label("Project").select_option(label="Vision lab")
    page.get_by_label("Software (one that provides JupyterLab)").select_option(label="JupyterLab 4.6 (modules)")
    page.get_by_label("Hardware").select_option(label="A100 node — Slurm (test cluster)")
    page.get_by_label("Walltime").fill("24:00:00")
    estimate = page.locator("#kh-estimate")
    # 3 points per node-hour for 24 hours, out of the strict 100 points left: the portal's own dry run says so.
    expect(estimate).to_have_text(
        "Estimate: 72.00 points for the whole walltime. Budget left: 100.00 points (strict).", timeout=30_000)
    sessions_site.budget.amount = 50
    sessions_site.budget.save()
    page.get_by_label("Walltime").fill("24:00")  # the same walltime, asked again: the budget has changed meanwhile
    expect(estimate).to_contain_text(re.compile(
        r"This session needs an estimated 72\.00 points but project vision has only 50\.00 points left"), timeout=30_000)
    page.get_by_role("button", name="Start").click()
    expect(page.locator("#progress-message")).to_contain_text(re.compile(
        r"Kakehashi refused the session: This session needs an estimated 72\.00 points but project vision has only "
        r"50\.00 points left"), timeout=60_000)
    assert not Job.objects.filter(kind=Job.Kind.SESSION).exists()


def run_a_cell_in_lab(lab, hub, session, job) -> None:
    """In the session's Lab (page `lab`): a notebook of its own in alice's home on the cluster (removed after), opened
    in a fresh workspace; the status bar's figures and walltime warning; a cell run on the node (its kernel's
    messages are websockets through the hub's proxy) prints the node and the Slurm job's id."""
    server = f"{hub.url}/user/alice/{session.server_name}"
    token = {"Authorization": f"token {hub.token('alice')}"}
    path = f"kakehashi-session-test-{session.server_name}.ipynb"
    created = requests.put(f"{server}/api/contents/{path}", headers=token, timeout=30, json={"type": "notebook", "content": {
        "nbformat": 4, "nbformat_minor": 5, "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                                         "language": "python"}},
        "cells": [{"cell_type": "code", "id": "c1", "metadata": {}, "execution_count": None, "outputs": [],
                   "source": ""}]}})
    assert created.status_code in (200, 201), created.text
    lab.goto(f"{server}/lab/tree/{path}?reset", timeout=LAB_TIMEOUT)
    expect(lab.locator(".jp-StatusBar-Widget").get_by_text(re.compile(r"Idle"))).to_be_visible(timeout=LAB_TIMEOUT)
    # Lab's status bar: the time left, the cost so far and the budget left; a 10-minute session is inside the
    # 15-minute warning from the start.
    expect(lab.locator(".kk-session-status")).to_contain_text(re.compile(
        rf"Session {session.server_name}: \d+ min left · [\d.]+ points so far · budget left [\d.]+ points"),
        timeout=LAB_TIMEOUT)
    expect(lab.get_by_text(re.compile(r"This session ends in \d+ minute\(s\), at its walltime: save your work now"))
           .first).to_be_visible(timeout=LAB_TIMEOUT)
    cell = lab.locator(".jp-NotebookPanel:visible .jp-Cell-inputArea .cm-content").first
    cell.click(timeout=LAB_TIMEOUT)
    lab.keyboard.type("import os, socket; print('host', socket.gethostname(), 'slurm job', os.environ['SLURM_JOB_ID'])")
    lab.keyboard.press("Shift+Enter")
    output = lab.locator(".jp-NotebookPanel:visible .jp-OutputArea-output").first
    expect(output).to_contain_text(f"slurm job {job.scheduler_id}", timeout=LAB_TIMEOUT)
    expect(output).to_contain_text("host ")
    requests.delete(f"{server}/api/contents/{path}", headers=token, timeout=30)
