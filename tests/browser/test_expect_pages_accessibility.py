"""The pages added for issue 12 and 14 pass axe-core's WCAG A/AA checks with real content in them."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.browser.a11y import check, report
from tests.browser.conftest import log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_new_pages_have_no_wcag_a_or_aa_violations(page, live_server, local_site, shots):
    from portal.clusters.health import collect_all
    from portal.jobs.actions.sweeps import submit_sweep
    from portal.jobs.actions.validation import JobRequest
    from portal.jobs.models import Job
    from portal.notifications.models import Notification

    collect_all()
    group = submit_sweep(local_site.alice, JobRequest(
        project=local_site.project, name="lr", script="true", hardware=local_site.hardware, walltime="00:01:00"),
        {"LR": [0.1, 0.2]}).group
    Job.objects.filter(group=group).update(state="failed", metrics={"loss": 0.5})
    Notification.objects.create(user=local_site.alice, kind="failed", text="Job lr-0 (vision) failed: exit code 3",
                                job=group.jobs.first())
    found: dict[str, str] = {}
    log_in(page, live_server.url, "alice")
    for step, path, heading in [
        ("jobs", "/jobs/", "Jobs"),
        ("sweep", f"/jobs/groups/{group.pk}/", "Sweep lr"),
        ("clusters", "/clusters/", "Clusters"),
        ("notifications", "/notifications/", "Notifications"),
        ("notification-settings", "/settings/notifications/", "Settings"),
        ("project-clusters", "/projects/vision/clusters/", "Clusters & hardware"),
    ]:
        page.goto(live_server.url + path)
        expect(page.get_by_role("heading", level=1)).to_contain_text(heading)
        shots(page, step)
        check(page, step, found)
    assert not found, report(found)
