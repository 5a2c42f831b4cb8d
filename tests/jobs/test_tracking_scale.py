"""A tracking cycle costs the same number of SQL statements for 10 jobs as for 200: changes are written in bulk.

The jobs are recorded by a real sweep submit (so each holds a reservation that its ending must settle) and then
handed, in the database, to job directories laid out the way the local backend's runner leaves them: half are
running (their runner's pid is a live process), a quarter finished with an exit code, a quarter have no
directory at all (lost). The cycle asks the real local backend, whose shell loop reads those directories.
"""

from __future__ import annotations

import os
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from portal.budgets.models import UnitConversion
from portal.jobs import tracking
from portal.jobs.actions import submit as submit_actions
from portal.jobs.actions.sweeps import submit_sweep
from portal.jobs.actions.validation import JobRequest
from portal.jobs.models import Job, JobEvent, JobState
from tests.jobs.test_statement_counts import statements

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _no_dispatch(monkeypatch, no_live_worker):
    # The jobs are handed to the "scheduler" by the test itself: no dispatch message may run them for real, and no
    # live worker an earlier test left running may track them before the cycle this test counts.
    monkeypatch.setattr(submit_actions, "enqueue_on_commit", lambda *task: None)


def _held_jobs(site, settings, count: int, name: str) -> list[Job]:
    """`count` jobs the scheduler has: running, finished or gone, in that 2:1:1 mix."""
    req = JobRequest(project=site.project, name=name, script="true", hardware=site.hardware, walltime="00:01:00")
    groups = [submit_sweep(site.alice, req, {"SEED": list(range(start, min(start + 100, count)))},
                                   array=False).group for start in range(0, count, 100)]  # 100: a sweep's limit
    jobs = list(Job.objects.filter(group__in=groups).order_by("pk"))
    root = Path(settings.KAKEHASHI_LOCAL_JOBS_DIR)
    long_ago = timezone.now() - timedelta(hours=1)
    ended = int(timezone.now().timestamp())
    for i, job in enumerate(jobs):
        job.state, job.scheduler_id, job.submitted_at, job.last_seen_at = JobState.PENDING, job.remote_dir, long_ago, long_ago
        folder = root / job.remote_dir
        if i % 4 in (0, 1):  # running: the runner's pid is a live process (this one)
            folder.mkdir(parents=True)
            (folder / "runner.pid").write_text(f"{os.getpid()}\n")
            (folder / "job.pid").write_text(f"{os.getpid()}\n")
        elif i % 4 == 2:  # finished: the runner recorded its accounting
            folder.mkdir(parents=True)
            for file, text in (("exit_code", "0"), ("started", str(ended - 30)), ("ended", str(ended)),
                               ("walltime", "60s")):
                (folder / file).write_text(text + "\n")
    Job.objects.bulk_update(jobs, ["state", "scheduler_id", "submitted_at", "last_seen_at"])
    return jobs


def _cycle(site) -> tuple[tracking.TrackReport, list[str]]:
    with CaptureQueriesContext(connection) as ctx:
        report = tracking.track_cluster(site.cluster.pk)
    return report, statements(ctx)


@pytest.mark.parametrize("budget_unit", ["points", "JPY"])
def test_a_tracking_cycle_issues_as_many_statements_for_200_jobs_as_for_10(local_site, settings, budget_unit):
    if budget_unit != local_site.hardware.rate_unit:  # every ending's cost is converted: one lookup, not one each
        UnitConversion.objects.create(from_unit=local_site.hardware.rate_unit, to_unit=budget_unit, factor=Decimal(10))
        local_site.budget.unit, local_site.budget.amount = budget_unit, Decimal(10000)
        local_site.budget.save()
    few = _held_jobs(local_site, settings, 10, "few")
    report_few, statements_few = _cycle(local_site)
    assert (report_few.changed, report_few.finished, report_few.lost) == (6, 2, 2)
    assert report_few.scheduler_calls == 2  # one status query, one accounting query for those that left it
    Job.objects.filter(pk__in=[job.pk for job in few]).update(state=JobState.CANCELLED)  # out of the next cycle

    many = _held_jobs(local_site, settings, 200, "many")
    report_many, statements_many = _cycle(local_site)
    assert (report_many.changed, report_many.finished, report_many.lost) == (100, 50, 50)
    assert report_many.scheduler_calls == 2
    assert len(statements_many) == len(statements_few), "\n".join(statements_many)

    # Written in bulk, yet every job moved with its event and every ending settled its reservation.
    states = dict(Job.objects.filter(pk__in=[job.pk for job in many]).values_list("pk", "state"))
    assert sorted(states.values()).count(JobState.RUNNING) == 100
    assert list(states.values()).count(JobState.COMPLETED) == 50
    assert list(states.values()).count(JobState.LOST) == 50
    assert JobEvent.objects.filter(job__in=many).exclude(from_state="").count() == 200
    completed = Job.objects.filter(pk__in=[job.pk for job in many], state=JobState.COMPLETED)
    assert all(job.exit_code == 0 and job.elapsed_seconds == 30 and job.estimate_unit == budget_unit for job in completed)
    # 30 s of one node at 10 points an hour, in the budget's unit.
    assert {job.cost_amount for job in completed} == {Decimal("0.8333") if budget_unit == "JPY" else Decimal("0.0833")}
    for job in completed:
        assert sorted(job.ledger.values_list("kind", flat=True)) == ["release", "reserve", "settle"]


def test_a_second_cycle_over_unchanged_jobs_moves_nothing_and_writes_no_event(local_site, settings):
    jobs = _held_jobs(local_site, settings, 8, "again")
    tracking.track_cluster(local_site.cluster.pk)
    events = JobEvent.objects.filter(job__in=jobs).count()
    report, _ = _cycle(local_site)
    assert (report.changed, report.finished, report.lost) == (0, 0, 0)
    assert JobEvent.objects.filter(job__in=jobs).count() == events
