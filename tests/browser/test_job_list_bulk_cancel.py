"""Bulk cancel from the job list, in a real browser: tick, confirm, and only the ticked jobs end."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_ticking_two_waiting_jobs_and_pressing_cancel_selected_cancels_those_two_only(page, live_server, local_site, shots):
    from portal.jobs.actions.submit import submit_job
    from portal.jobs.actions.validation import JobRequest
    from portal.jobs.models import Job, JobState

    def submit(name: str) -> Job:
        return submit_job(local_site.alice, JobRequest(
            project=local_site.project, name=name, script="sleep 60", hardware=local_site.hardware,
            walltime="00:10:00")).job

    first, second, kept = submit("sweep-a"), submit("sweep-b"), submit("keep-me")
    Job.objects.filter(pk__in=[first.pk, second.pk, kept.pk]).update(state=JobState.PENDING)  # as if on the cluster
    log_in(page, live_server.url, "alice", next_path="/jobs/")
    page.get_by_label("Search").fill("sweep-")
    page.get_by_role("button", name="Filter").click()
    expect(page.locator("#job-list tbody tr")).to_have_count(2)
    page.get_by_label("Select job sweep-a").check()
    page.get_by_label("Select job sweep-b").check()
    shots(page, "ticked")
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Cancel selected").click()
    expect(page.get_by_role("alert").filter(has_text="Cancelling 2 job(s): sweep-a, sweep-b.")).to_be_visible()
    expect(page).to_have_url(re.compile(r"/jobs/\?.*q=sweep-"))  # back on the same filtered list
    shots(page, "cancelled")
    assert {j.cancel_requested_at is not None for j in Job.objects.filter(pk__in=[first.pk, second.pk])} == {True}
    assert Job.objects.get(pk=kept.pk).cancel_requested_at is None
