"""Notifications: when a job ends, fails, is lost or is cancelled by someone else or by its budget, the owner is
told in the portal's bell and by email, as they chose; a sweep once, when it ends. Every notice here comes from the
real path that produces it (the tracker reading the local backend's accounting, the budget enforcer, a cancel
carried out by the cancel task), never from a hand-written reason. Tasks run in this process (Celery eager) after
the commit, so the locmem email backend's outbox shows what was sent. The same endings on Slurm and Grid Engine:
tests/jobs/test_endings_are_told.py."""

from __future__ import annotations

import time
from decimal import Decimal

import pytest
from celery import current_app
from django.core import mail

from portal.jobs.actions.cancel import request_cancel
from portal.jobs.actions.submit import submit_job
from portal.jobs.actions.validation import JobRequest
from portal.jobs.models import Job, JobState
from portal.jobs.tracking import track_cluster
from portal.notifications.models import Notification
from portal.projects.models import Membership, Role
from tests.conftest import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("no_live_worker")]


def _run(site, script: str, name: str) -> Job:
    """Submit (dispatched at once, eagerly) and track until the job ends, as the beat would."""
    job = submit_job(site.alice, JobRequest(project=site.project, name=name, script=script,
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


def _running(site, name: str, user=None, **extra) -> Job:
    """A job submitted (dispatched at once, eagerly) and seen running by the tracker."""
    job = submit_job(user or site.alice, JobRequest(project=site.project, name=name, script="sleep 300",
                                                   hardware=site.hardware, walltime="00:05:00", **extra)).job

    def running():
        track_cluster(site.cluster.pk)
        return Job.objects.filter(pk=job.pk, state=JobState.RUNNING).first()

    return wait_for(running, timeout=60, interval=0.3, message=f"job {name} to run")


def _ended(site, job: Job) -> Job:
    def ended():
        track_cluster(site.cluster.pk)
        found = Job.objects.get(pk=job.pk)
        return found if found.is_final else None

    return wait_for(ended, timeout=60, interval=0.3, message=f"job {job.name} to end")


def test_a_cancel_you_made_yourself_tells_you_nothing_and_an_admins_cancel_tells_you_who(local_site, eager,
                                                                                        make_user):
    local_site.alice.email = "alice@example.org"
    local_site.alice.save()
    carol = make_user("carol")
    Membership.objects.create(user=carol, project=local_site.project, role=Role.ADMIN)
    mine, theirs = _running(local_site, "mine"), _running(local_site, "theirs")
    request_cancel(mine, local_site.alice)
    request_cancel(theirs, carol)
    mine, theirs = _ended(local_site, mine), _ended(local_site, theirs)
    assert (mine.state, mine.events.last().cause) == (JobState.CANCELLED, "cancelled_by_owner")
    assert (theirs.state, theirs.events.last().cause) == (JobState.CANCELLED, "cancelled_by_admin")
    (notice,) = Notification.objects.filter(user=local_site.alice)
    assert notice.kind == "cancelled" and notice.job_id == theirs.pk
    assert notice.text == "Job theirs (vision) cancelled by carol, an admin of project vision"
    assert [m.subject for m in mail.outbox] == [f"[Kakehashi] {notice.text}"]


def test_a_strict_budget_cancel_tells_the_owner_and_the_projects_admins_with_the_figures(local_site, eager,
                                                                                        make_user):
    from portal.budgets.models import Budget
    from portal.usage.enforcement import enforce

    local_site.alice.email = "alice@example.org"
    local_site.alice.save()
    bob = make_user("bob")  # a member whose job the budget stops
    Membership.objects.create(user=bob, project=local_site.project, role=Role.MEMBER)
    job = _running(local_site, "forgotten", user=bob)
    # An admin lowers the budget below what the running job has already burnt; the beat's enforcer runs.
    Budget.objects.filter(pk=local_site.budget.pk).update(amount=Decimal("0.0001"))
    time.sleep(1.1)  # a second at 10 points an hour is 0.0028 points: over the new budget
    report = enforce(Budget.objects.get(pk=local_site.budget.pk))
    assert report.cancelled == [job.pk]
    job = _ended(local_site, job)
    assert job.state == JobState.CANCELLED
    ending = job.events.last()
    assert ending.cause == "cancelled_by_budget" and ending.who == "the project's strict budget"
    assert ending.reason.startswith("cancelled by your project's strict budget: ")
    assert " of 0.0001 points used (spent 0.00 + running jobs " in ending.reason
    (told,) = Notification.objects.filter(user=bob)
    assert told.kind == "budget" and told.text == f"Job forgotten (vision) {ending.reason}"
    admins = Notification.objects.filter(user=local_site.alice, kind="budget_alert").values_list("text", flat=True)
    assert "Project vision's strict budget is used up (" in " ".join(admins)
    cancelled_mail = next(m for m in mail.outbox if "strict budget is used up" in m.subject)
    assert cancelled_mail.to == ["alice@example.org"] and f"job {job.pk} forgotten (bob)" in cancelled_mail.body
    assert [m.to for m in mail.outbox if m.subject == f"[Kakehashi] {told.text}"[:200]] == [["bob@example.org"]]


def test_a_sweep_tells_its_owner_once_when_its_last_point_ends_with_the_counts(local_site, eager):
    from portal.jobs.actions.sweeps import submit_sweep

    sweep = submit_sweep(local_site.alice, JobRequest(
        project=local_site.project, name="grid", script='exit "$CODE"', hardware=local_site.hardware,
        walltime="00:05:00"), {"CODE": [0, 0, 3]}, array=False)

    def ended():
        track_cluster(local_site.cluster.pk)
        return not Job.objects.filter(group=sweep.group).exclude(state__in=["completed", "failed"]).exists()

    wait_for(ended, timeout=60, interval=0.3, message="every point to end")
    (notice,) = Notification.objects.filter(user=local_site.alice)
    assert notice.kind == "sweep_failed" and notice.sweep_id == sweep.group.pk
    assert notice.text == "Sweep grid (vision) ended: 2 completed, 1 failed"
    track_cluster(local_site.cluster.pk)
    assert Notification.objects.filter(user=local_site.alice).count() == 1  # once


def test_a_job_the_machine_forgot_is_told_to_its_owner_as_lost(local_site, eager, settings):
    import os
    import shutil
    import signal
    from pathlib import Path

    settings.KAKEHASHI_LOST_AFTER_SECONDS = 0
    job = _running(local_site, "vanishes")
    # The node is wiped: its processes gone, its job directory with them.
    folder = Path(settings.KAKEHASHI_LOCAL_JOBS_DIR) / job.remote_dir
    for pid_file in ("job.pid", "runner.pid"):
        try:
            os.killpg(int((folder / pid_file).read_text()), signal.SIGKILL)
        except (ProcessLookupError, FileNotFoundError, ValueError):
            pass
    shutil.rmtree(folder)
    wait_for(lambda: track_cluster(local_site.cluster.pk).lost == 1 or Job.objects.get(pk=job.pk).state == "lost",
             timeout=30, message="the tracker to miss the job")
    job.refresh_from_db()
    assert (job.state, job.events.last().cause) == (JobState.LOST, "lost")
    (notice,) = Notification.objects.filter(user=local_site.alice)
    assert notice.kind == "lost" and notice.text.startswith("Job vanishes (vision) is lost: neither the scheduler")


def test_nothing_is_sent_when_the_ending_rolls_back(local_site, eager):
    from django.db import transaction

    from portal.budgets.models import Budget
    from portal.usage.enforcement import enforce

    local_site.alice.email = "alice@example.org"
    local_site.alice.save()
    assert _run(local_site, "sleep 2", "spends").cost_amount > 0
    current_app.conf.task_always_eager = False  # leave the job queued: no dispatch
    job = submit_job(local_site.alice, JobRequest(
        project=local_site.project, name="undone", script="true", hardware=local_site.hardware, walltime="00:05:00")).job
    current_app.conf.task_always_eager = True
    Budget.objects.filter(pk=local_site.budget.pk).update(amount=Decimal("0.0001"))  # below what was spent
    mail.outbox.clear()
    with pytest.raises(RuntimeError), transaction.atomic():
        assert enforce(Budget.objects.get(pk=local_site.budget.pk)).cancelled == [job.pk]
        raise RuntimeError("the transaction fails after the ending")
    assert mail.outbox == [] and not Notification.objects.exclude(kind="ended").exists()
    assert Job.objects.get(pk=job.pk).state == JobState.QUEUED
