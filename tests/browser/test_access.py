"""Someone outside a project sees nothing of it, in the browser as in the HTML."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_non_member_gets_404_for_another_projects_job_and_never_sees_it_listed(page, live_server, local_site, shots):
    from portal.jobs.models import Job, JobState

    secret = Job.objects.create(
        project=local_site.project, user=local_site.alice, cluster=local_site.cluster, hardware=local_site.hardware,
        name="secret-vision-run", walltime_seconds=600, script="echo secret", state=JobState.COMPLETED,
        scheduler_id="777", estimate_amount=1, estimate_unit="points", cost_amount=1,
    )
    base = live_server.url
    # The owner sees it (so the pages below are not empty by accident) ...
    owner = page
    log_in(owner, base, "alice")
    owner.goto(f"{base}/jobs/")
    expect(owner.get_by_role("link", name="secret-vision-run")).to_be_visible()
    owner.context.clear_cookies()

    # ... mallory, owner of another project, does not.
    log_in(page, base, "mallory")
    for path in (f"/jobs/{secret.pk}/", f"/jobs/{secret.pk}/status/", f"/jobs/{secret.pk}/log/stdout/",
                 f"/jobs/new/?clone={secret.pk}", "/projects/vision/", "/projects/vision/members/"):
        response = page.goto(base + path)
        if path.startswith("/jobs/new/"):
            assert response.status == 200, path  # the form opens, empty: the clone source is invisible
            expect(page.locator("#job-form [name=script]")).not_to_have_value("echo secret")
        else:
            assert response.status == 404, (path, response.status)
            expect(page.locator("body")).not_to_contain_text("secret-vision-run")
            if not path.endswith(("/status/", "/stdout/")):
                expect(page.get_by_role("heading", level=1)).to_have_text("Not found")
                expect(page.get_by_role("link", name="Back to your projects and jobs")).to_be_visible()
    shots(page, "job-page-404")
    for path in ("/", "/jobs/", "/projects/", "/usage/"):
        page.goto(base + path)
        expect(page.locator("main")).not_to_contain_text("secret-vision-run")
        expect(page.locator("main")).not_to_contain_text("Vision lab")
    page.goto(base + "/jobs/")
    expect(page.get_by_text("No jobs yet.")).to_be_visible()
    shots(page, "jobs-list-empty")
