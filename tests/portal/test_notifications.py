"""Notifications: when a job ends, fails or is cancelled by its budget the owner is told in the portal's bell and
by email, as they chose. Jobs run for real on the local backend; tasks run in this process (Celery eager) after
the commit, so the locmem email backend's outbox shows what was sent."""

from __future__ import annotations

import re

import pytest
from celery import current_app
from django.core import mail

from portal.jobs import actions
from portal.jobs.models import Job, JobState
from portal.jobs.tracking import track_cluster
from portal.notifications.models import Notification
from tests.conftest import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("no_live_worker")]


@pytest.fixture
def eager():
    before = current_app.conf.task_always_eager
    current_app.conf.task_always_eager = True
    mail.outbox.clear()
    yield
    current_app.conf.task_always_eager = before


def _run(site, script: str, name: str) -> Job:
    """Submit (dispatched at once, eagerly) and track until the job ends, as the beat would."""
    job = actions.submit_job(site.alice, actions.JobRequest(project=site.project, name=name, script=script,
                                                            hardware=site.hardware, walltime="00:05:00")).job

    def ended():
        track_cluster(site.cluster.pk)
        return Job.objects.filter(pk=job.pk, state__in=[JobState.COMPLETED, JobState.FAILED]).first()

    return wait_for(ended, timeout=60, interval=0.5, message=f"job {name} to end")


def test_a_failed_job_is_in_the_bell_and_emailed_and_a_completed_one_only_in_the_bell_by_default(client, local_site,
                                                                                                eager):
    local_site.alice.email = "alice@example.org"
    local_site.alice.save()
    failed = _run(local_site, "exit 3", "breaks")
    assert failed.state == JobState.FAILED
    assert [m.to for m in mail.outbox] == [["alice@example.org"]]
    assert mail.outbox[0].subject.startswith("[Kakehashi] Job breaks (vision) failed")
    assert f"/jobs/{failed.pk}/" in mail.outbox[0].body
    done = _run(local_site, "echo ok", "works")
    assert done.state == JobState.COMPLETED and len(mail.outbox) == 1  # no email for a success unless asked
    client.force_login(local_site.alice)
    page = client.get("/jobs/").content.decode()
    assert 'aria-label="Notifications, 2 unread"' in page
    listing = client.get("/notifications/").content.decode()
    assert "Job breaks (vision) failed" in listing and "Job works (vision) completed" in listing

    # She asks to be emailed when a job ends too; the next one is.
    client.post("/settings/notifications/", {"portal_ended": "on", "portal_failed": "on", "portal_budget": "on",
                                             "email_ended": "on", "email_failed": "on", "email_budget": "on"})
    _run(local_site, "echo again", "again")
    assert mail.outbox[-1].subject.startswith("[Kakehashi] Job again (vision) completed")

    # Someone else sees none of it and cannot mark it read.
    client.force_login(local_site.mallory)
    assert "breaks" not in client.get("/notifications/").content.decode()
    client.post("/notifications/read/")
    assert Notification.objects.filter(user=local_site.alice, read_at__isnull=True).count() == 3
    client.force_login(local_site.alice)
    client.post("/notifications/read/")
    assert not Notification.objects.filter(user=local_site.alice, read_at__isnull=True).exists()
    assert "Notifications, " not in client.get("/jobs/").content.decode()


def test_a_job_cancelled_by_the_budget_is_told_as_such_and_a_job_you_cancel_yourself_is_not(local_site, eager):
    local_site.alice.email = "alice@example.org"
    local_site.alice.save()
    current_app.conf.task_always_eager = False  # leave the jobs queued: no dispatch
    request = actions.JobRequest(project=local_site.project, name="waits", script="sleep 60", hardware=local_site.hardware,
                                 walltime="00:05:00")
    budget_job = actions.submit_job(local_site.alice, request).job
    own_job = actions.submit_job(local_site.alice, actions.JobRequest(**{**request.__dict__, "name": "mine"})).job
    current_app.conf.task_always_eager = True
    actions.cancel_for_budget(budget_job.pk, "cancelled: project vision reached its strict budget of 100.00 points "
                                             "(spent 99.00 + running 1.00)")
    actions.request_cancel(own_job, local_site.alice)
    (notice,) = Notification.objects.filter(user=local_site.alice)
    assert notice.kind == "budget" and notice.job_id == budget_job.pk and "strict budget" in notice.text
    assert len(mail.outbox) == 1 and re.search(r"Job waits \(vision\) cancelled: .*strict budget", mail.outbox[0].subject)


def test_nothing_is_sent_when_the_ending_rolls_back(local_site, eager):
    from django.db import transaction

    local_site.alice.email = "alice@example.org"
    local_site.alice.save()
    current_app.conf.task_always_eager = False
    job = actions.submit_job(local_site.alice, actions.JobRequest(
        project=local_site.project, name="undone", script="true", hardware=local_site.hardware, walltime="00:05:00")).job
    current_app.conf.task_always_eager = True
    with pytest.raises(RuntimeError), transaction.atomic():
        actions.cancel_for_budget(job.pk, "cancelled: project vision reached its strict budget")
        raise RuntimeError("the transaction fails after the ending")
    assert mail.outbox == [] and not Notification.objects.exists()
