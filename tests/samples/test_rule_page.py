"""A project's owner sets the idle-GPU rule on its page, within the site's bounds; the job page then names it."""

from __future__ import annotations

import pytest

from portal.audit.models import AuditEntry
from portal.samples.models import IdleRule
from portal.samples.policy import rule_for_project

pytestmark = pytest.mark.django_db

RULE = {"threshold_percent": "3", "window_minutes": "45", "warn_at_minutes": "45, 90", "action": "cancel",
        "cancel_after_minutes": "120", "keep_max_hours": "8", "exempt_busy_gpus": "2",
        "exempt_users": "carol, dave", "exempt_hardware": "", "exempt_sessions_under_hours": "2"}


def test_the_owner_sets_the_rule_and_it_applies_to_the_projects_jobs(client, local_site):
    client.force_login(local_site.alice)
    page = client.get("/projects/vision/idle-rule/")
    assert page.status_code == 200 and "Now: Site rule" in page.content.decode()
    saved = client.post("/projects/vision/idle-rule/", RULE, follow=True)
    assert "The idle-GPU rule of vision is saved." in saved.content.decode()
    rule = rule_for_project(local_site.project)
    assert (rule.threshold_percent, rule.window_seconds, rule.warn_at_seconds) == (3, 2700, (2700, 5400))
    assert rule.action == "cancel" and rule.exempt_users == frozenset({"carol", "dave"}) and rule.exempt_busy_gpus == 2
    assert rule.source == "project vision"
    assert AuditEntry.objects.filter(action="idle_rule.set", actor=local_site.alice).count() == 1


def test_a_rule_outside_the_sites_bounds_is_refused_saying_which(client, local_site, settings):
    settings.KAKEHASHI_IDLE_CANCEL_ALLOWED = False
    client.force_login(local_site.alice)
    page = client.post("/projects/vision/idle-rule/", {**RULE, "window_minutes": "5", "threshold_percent": "60"})
    text = page.content.decode()
    assert "the window must be at least 30 minutes" in text and "at most 25 %" in text
    assert "this site does not let the rule cancel jobs" in text
    assert not IdleRule.objects.exists()


@pytest.mark.long
def test_every_hostile_value_in_every_field_of_the_rule_form_gets_a_page_not_an_error(client, local_site):
    """The security walk's corpus (tests/security/hostile.py) in each field of the rule's form and of Keep running."""
    import json

    from tests.security.hostile import CANARY, SAMPLE

    client.force_login(local_site.alice)
    values = [v if isinstance(v, str) else json.dumps(v) for v in SAMPLE]
    for field in RULE:
        for value in values:
            response = client.post("/projects/vision/idle-rule/", {**RULE, field: value})
            assert response.status_code in (200, 302), (field, value, response.status_code)
            client.cookies.pop("messages", None)  # read on the next page by a person; not followed here
    from portal.jobs.actions.submit import submit_job
    from portal.jobs.actions.validation import JobRequest
    from portal.jobs.models import Job, JobState

    job = submit_job(local_site.alice, JobRequest(project=local_site.project, name="kept", script="true",
                                                  hardware=local_site.hardware, walltime="00:05:00")).job
    Job.objects.filter(pk=job.pk).update(state=JobState.RUNNING, scheduler_id="x")
    for value in values:
        assert client.post(f"/jobs/{job.pk}/keep/", {"hours": value}).status_code == 302, value
        client.cookies.pop("messages", None)
    from pathlib import Path

    assert not Path(CANARY).exists()


def test_a_short_interactive_session_is_exempt_under_the_projects_rule_and_a_batch_job_of_the_same_length_is_not(
        client, local_site):
    from decimal import Decimal

    from portal.catalog.models import HardwareType
    from portal.jobs.models import Job, JobState
    from portal.samples.policy import facts_of
    from portal.samples.rule import exemption

    client.force_login(local_site.alice)
    client.post("/projects/vision/idle-rule/", RULE)  # sessions under 2 hours are exempt
    gpu = HardwareType.objects.create(cluster=local_site.cluster, slug="local-gpu", name="Local GPU", cpus_per_node=2,
                                      gpus_per_node=1, max_nodes=1, rate=Decimal("1"))
    rule = rule_for_project(local_site.project)
    made = {kind: Job.objects.create(project=local_site.project, user=local_site.alice, cluster=local_site.cluster,
                                     hardware=gpu, name=kind, kind=kind, state=JobState.RUNNING,
                                     walltime_seconds=3600) for kind in (Job.Kind.SESSION, Job.Kind.SCRIPT)}
    assert exemption(rule, facts_of(made[Job.Kind.SESSION])) == "interactive sessions under 2 hours are exempt"
    assert exemption(rule, facts_of(made[Job.Kind.SCRIPT])) == ""


def test_the_sites_rule_exempts_sessions_under_the_hours_the_site_sets(settings):
    from portal.samples.policy import site_rule
    from portal.samples.rule import JobFacts, exemption

    settings.KAKEHASHI_IDLE_EXEMPT_SESSIONS_UNDER_HOURS = 4
    session = JobFacts(username="alice", hardware="a100", gpus_reserved=1, is_session=True, walltime_seconds=3 * 3600)
    assert exemption(site_rule(), session) == "interactive sessions under 4 hours are exempt"
    assert exemption(site_rule(), JobFacts(**{**session.__dict__, "walltime_seconds": 5 * 3600})) == ""
