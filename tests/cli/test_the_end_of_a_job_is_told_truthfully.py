"""How a job ended is told as accounting recorded it, the same on the job page, the job list, the API and the CLI:
a cancel or a walltime kill is the signal that killed the job (never "exit code 0"), a script's own exit code
is the one its log shows, and a cancel says who or what asked for it and why."""

from __future__ import annotations

import time
from decimal import Decimal

import pytest
from django.test import Client
from django.urls import reverse
from django.utils.html import escape

from backends.script import SAMPLER_FILE
from portal.budgets.models import Budget
from portal.catalog.models import HardwareType
from portal.jobs.actions.submit import submit_job
from portal.jobs.actions.validation import JobRequest
from portal.jobs.models import Job, JobOutput, JobState
from portal.usage.enforcement import enforce
from tests.conftest import QUEUE_WAIT, ended_job, wait_for
from tests.processes import running

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def _submit(site, hardware: str, name: str, script: str, walltime: str = "00:10:00") -> Job:
    return submit_job(site.alice, JobRequest(
        project=site.project, name=name, script=script, hardware=HardwareType.objects.get(slug=hardware),
        walltime=walltime)).job


def _running(job: Job) -> None:
    wait_for(lambda: Job.objects.filter(pk=job.pk, state=JobState.RUNNING).exists(), timeout=QUEUE_WAIT + 60,
             message=f"{job.name} to run")


def _told(browser: Client, kh, job: Job) -> dict[str, str]:
    """What each place says of the job's end."""
    page = browser.get(reverse("job-detail", args=[job.pk])).content.decode()
    listed = browser.get(reverse("job-list")).content.decode()
    api = kh("--json", "status", str(job.pk))
    assert api.code == 0, api.err
    human = kh("status", str(job.pk))
    return {"page": page, "list": listed, "api": api.json()["exit_text"], "cli": human.out}


@pytest.mark.long
@pytest.mark.cluster
def test_cancels_and_walltime_kills_on_slurm_and_grid_engine_say_which_signal_ended_them(
        hpc_site, live_worker, logged_in):
    browser = Client()
    browser.force_login(hpc_site.alice)
    jobs = {
        "slurm-cancel": _submit(hpc_site, "slurm-a100x1", "slurm-cancel", "sleep 300\n"),
        "slurm-timeout": _submit(hpc_site, "slurm-a100x1", "slurm-timeout", "sleep 300\n", walltime="00:01:00"),
        "slurm-exit-143": _submit(hpc_site, "slurm-a100x1", "slurm-exit-143", "exit 143\n"),
        "sge-cancel": _submit(hpc_site, "sge-gpu", "sge-cancel", "sleep 300\n"),
        "sge-timeout": _submit(hpc_site, "sge-gpu", "sge-timeout", "sleep 300\n", walltime="00:00:05"),
    }
    for name in ("slurm-cancel", "sge-cancel"):
        _running(jobs[name])
        browser.post(reverse("job-cancel", args=[jobs[name].pk]))
    ended = {name: wait_for(lambda j=job: ended_job(j.pk), timeout=180, message=f"{name} to end")
             for name, job in jobs.items()}

    expected = {
        # Slurm's accounting: the allocation says 0:0, its batch step 0:15.
        "slurm-cancel": (JobState.CANCELLED, None, 15, "killed by signal 15 (SIGTERM)"),
        "slurm-timeout": (JobState.TIMED_OUT, None, 15, "killed by signal 15 (SIGTERM)"),
        # sacct says 15:0 (slurmdbd keeps 7 bits); the script, its log and slurmctld say 143.
        "slurm-exit-143": (JobState.FAILED, 143, None, "exit code 143 (128 + SIGTERM)"),
        # qacct: exit_status 137 (Killed), the shell's 128 + SIGKILL.
        "sge-cancel": (JobState.CANCELLED, 137, None, "exit code 137 (128 + SIGKILL)"),
        "sge-timeout": (JobState.TIMED_OUT, 137, None, "exit code 137 (128 + SIGKILL)"),
    }
    for name, (state, code, signal, text) in expected.items():
        job = ended[name]
        assert (job.state, job.exit_code, job.exit_signal) == (state, code, signal), (name, job.state_reason)
        told = _told(browser, logged_in, job)
        assert f'<div id="job-exit">{text}</div>' in told["page"], name
        assert text in told["list"] and told["api"] == text, name
        assert f"exit: {text}" in told["cli"], (name, told["cli"])
        assert "exit code 0" not in told["page"] and "exit code 0" not in told["cli"], name
    for name in ("slurm-cancel", "sge-cancel"):
        assert ended[name].state_reason == "cancelled by alice", name
        # Nothing of a cancelled job samples on: its sampler stops within a second of its script's end.
        sampler = f"{ended[name].remote_dir}/{SAMPLER_FILE}"
        wait_for(lambda s=sampler: not running(s), timeout=10,
                 message=f"the sampler of {name} to stop")
    log = wait_for(lambda: JobOutput.objects.filter(job=ended["slurm-exit-143"], stream="stdout", complete=True).first(),
                   message="the log of the job that exited 143")
    assert "exit status 143 ==" in bytes(log.data).decode()


def test_a_job_the_strict_budget_cancelled_says_so_and_why_at_the_top_of_its_page(local_site, live_worker, logged_in):
    job = _submit(local_site, "local-cpu", "forgotten", "echo started; sleep 300\n", walltime="01:00:00")
    _running(job)
    Budget.objects.filter(project=local_site.project).update(amount=Decimal("0.0001"))
    time.sleep(1)  # a second at 10 points an hour is 0.0028 points: over the new budget
    enforce(Budget.objects.get(project=local_site.project))  # or the worker's periodic check got there first
    job = wait_for(lambda: ended_job(job.pk), timeout=60, message="the cancel on the local backend")
    assert job.state == JobState.CANCELLED
    cause = "cancelled by your project's strict budget: "
    assert job.state_reason.startswith(cause) and " of 0.0001 points used (spent 0.00 + running jobs " in job.state_reason

    browser = Client()
    browser.force_login(local_site.alice)
    page = browser.get(reverse("job-detail", args=[job.pk])).content.decode()
    top = page[:page.index('id="events"')]
    assert 'id="cancel-cause"' in top and escape(cause.capitalize()) in top
    assert "cancelled by request" not in page
    answer = logged_in("--json", "status", str(job.pk)).json()
    assert answer["cancel_reason"].startswith(cause) and answer["state_reason"] == answer["cancel_reason"]
    assert answer["cancel_cause"] == "cancelled_by_budget"

    # Its history, with each event's cause and who or what did it: the API and `kakehashi status ID --events`.
    history = logged_in("--json", "status", str(job.pk), "--events").json()["events"]
    assert [e["cause"] for e in history][:2] == ["submitted", "dispatched"]
    asked, ended = history[-2], history[-1]
    assert (asked["cause"], asked["who"], asked["actor"]) == ("cancel_requested", "the project's strict budget", None)
    assert asked["data"]["by"] == "cancelled_by_budget" and asked["data"]["amount"] == "0.0001"
    assert (ended["cause"], ended["to_state"], ended["text"]) == ("cancelled_by_budget", "cancelled", job.state_reason)
    table = logged_in("status", str(job.pk), "--events").out
    assert "History:" in table and "cancelled_by_budget" in table and "the project's strict budget" in table
    assert logged_in("status", "--events").code == 2  # a history needs a job
