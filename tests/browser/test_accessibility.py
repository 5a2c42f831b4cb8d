"""Accessibility basics on the main pages, checked by axe-core in a real browser, and the keyboard path to Run."""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from tests.browser.a11y import check, report
from tests.browser.conftest import log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _finished_job(site):
    """A job as the tracker leaves it: completed, settled, its output kept in the portal."""
    from portal.jobs.models import Job, JobEvent, JobOutput, JobState

    ended = timezone.now() - timedelta(minutes=5)
    job = Job.objects.create(
        project=site.project, user=site.alice, cluster=site.cluster, hardware=site.hardware, name="resnet-baseline",
        walltime_seconds=3600, script="python train.py --epochs 2\n", rendered_script="#!/bin/bash\npython train.py --epochs 2\n",
        scheduler_name="kk-resnet-baseline", scheduler_id="4242", remote_dir="/tmp/kk/resnet-baseline",
        state=JobState.COMPLETED, exit_code=0, started_at=ended - timedelta(minutes=12), ended_at=ended,
        elapsed_seconds=720, estimate_amount=Decimal("10"), estimate_unit="points", cost_amount=Decimal("2"),
    )
    for from_state, to_state in (("", "queued"), ("queued", "submitting"), ("submitting", "pending"),
                                 ("pending", "running"), ("running", "completed")):
        JobEvent.objects.create(job=job, from_state=from_state, to_state=to_state, reason="")
    JobOutput.objects.create(job=job, stream="stdout", data=b"epoch 1 loss 0.91\nepoch 2 loss 0.55\n", complete=True)
    JobOutput.objects.create(job=job, stream="stderr", data=b"", complete=True)
    return job


def test_main_pages_have_no_wcag_a_or_aa_violations(page, live_server, local_site, shots):
    job = _finished_job(local_site)
    base = live_server.url

    found: dict[str, str] = {}
    page.goto(base + "/accounts/login/")
    shots(page, "login")
    check(page, "login", found)
    log_in(page, base, "alice")

    pages = [
        ("dashboard", "/", "Welcome, alice"),
        ("job-form", "/jobs/new/", "New job"),
        ("job-page", f"/jobs/{job.pk}/", "resnet-baseline"),
        ("jobs", "/jobs/", "Jobs"),
        ("project", "/projects/vision/", "Vision lab"),
        ("members", "/projects/vision/members/", "Members"),
        ("budget", "/projects/vision/budget/", "Budget"),
        ("usage", "/projects/vision/usage/", "Usage of Vision lab"),
        ("cluster-accounts", "/settings/clusters/", "Settings"),
        ("not-found", "/jobs/999999/", "Not found"),
    ]
    for step, path, heading in pages:
        page.goto(base + path)
        expect(page.get_by_role("heading", level=1)).to_contain_text(heading)
        if step == "job-form":
            # Check the page with the preview htmx puts there once the form is filled.
            page.get_by_label("Hardware", exact=True).select_option(str(local_site.hardware.pk))
            page.get_by_label("Name", exact=True).fill("a11y-check")
            page.get_by_label("Script", exact=True).fill("echo hello")
            expect(page.locator("#script-preview")).to_contain_text("a11y-check")
        if step == "job-page":
            expect(page.locator("#stdout-pane pre.log")).to_contain_text("epoch 2 loss 0.55")
        if step == "usage":
            expect(page.locator("#usage-table")).to_contain_text("local-cpu")
        shots(page, step)
        check(page, step, found)
    assert not found, report(found)


def test_keyboard_reaches_the_skip_link_first_and_runs_a_job(page, live_server, local_site, shots):
    from portal.jobs.models import Job

    base = live_server.url
    log_in(page, base, "alice", next_path="/jobs/new/")
    expect(page.get_by_role("heading", name="New job")).to_be_visible()

    # The first Tab from the top of the page lands on the skip link, which is then visible, and Enter skips.
    page.keyboard.press("Tab")
    skip = page.get_by_role("link", name="Skip to content")
    expect(skip).to_be_focused()
    expect(skip).to_be_visible()
    shots(page, "skip-link-focused", full_page=False)
    page.keyboard.press("Enter")
    expect(page.locator("main#main")).to_be_focused()

    # From there, Tab through the form in order, typing into Name and Script, until Run has the focus.
    run = page.get_by_role("button", name="Run", exact=True)
    name = page.get_by_label("Name", exact=True)
    script = page.get_by_label("Script", exact=True)
    visited: list[str] = []
    for _ in range(80):
        page.keyboard.press("Tab")
        focused = page.evaluate("document.activeElement.id || document.activeElement.tagName")
        visited.append(focused)
        if focused == "id_hardware":
            page.keyboard.press("ArrowDown")  # the first hardware: Local CPU
        elif focused == "id_name":
            page.keyboard.type("keyboard-only")
        elif focused == "id_script":
            page.keyboard.type("echo typed with the keyboard")
        elif focused == "run-button":
            break
    else:
        raise AssertionError(f"Tab never reached the Run button; it went through {visited}")
    assert visited.index("id_project") < visited.index("id_hardware") < visited.index("id_name") < visited.index("id_script"), visited
    expect(run).to_be_focused()
    expect(page.get_by_label("Hardware", exact=True)).to_have_value(str(local_site.hardware.pk))
    expect(name).to_have_value("keyboard-only")
    expect(script).to_have_value(re.compile("echo typed with the keyboard"))
    expect(page.locator("#script-preview")).to_contain_text("keyboard-only")
    shots(page, "run-focused", full_page=False)
    page.keyboard.press("Enter")
    expect(page).to_have_url(re.compile(r"/jobs/\d+/$"))
    job = Job.objects.get(name="keyboard-only")
    assert job.user == local_site.alice and "echo typed with the keyboard" in job.script
    shots(page, "job-page")


def test_the_axe_check_itself_finds_a_missing_label_low_contrast_and_content_outside_landmarks(page, live_server):
    """The checks above can fail: the same axe run on a page with the faults it is meant to catch reports them."""
    from tests.browser.a11y import axe_violations

    page.goto(live_server.url + "/accounts/login/")
    page.evaluate("""() => {
        const box = document.createElement('div');
        box.innerHTML = '<input type="text" id="unlabelled"><p style="color:#bbb;background:#fff">faint text</p>'
            + '<button type="button"><i class="bi bi-x"></i></button>';
        document.body.appendChild(box);
    }""")
    found = {v["id"] for v in axe_violations(page)}
    assert {"label", "color-contrast", "region", "button-name"} <= found, found
