"""Money is shown by one rule on the pages and in the CLI, and exactly in CSV and the API: small costs are never
"0.00", and a usage CSV adds up to what the budget says was spent."""

from __future__ import annotations

import csv
import io
from datetime import timedelta
from decimal import Decimal

import pytest
from django.test import Client
from django.utils import timezone

from backends.base import JobRecord, State
from portal.budgets import actions as budgets
from portal.jobs import tracking
from portal.jobs.actions.submit import submit_job
from portal.jobs.actions.validation import JobRequest
from portal.jobs.models import Job, JobState

pytestmark = pytest.mark.django_db(transaction=True)


def _settled(site, name: str, seconds: int) -> Job:
    """A job of `seconds` on a 10-point node-hour, ended as the tracker ends it from accounting."""
    job = submit_job(site.alice, JobRequest(project=site.project, name=name, script="true",
                                                            hardware=site.hardware, walltime="00:01:00")).job
    Job.objects.filter(pk=job.pk).update(state=JobState.RUNNING, scheduler_id=f"local-{name}", started_at=timezone.now())
    now = timezone.now()
    tracking.finish_job(job.pk, JobRecord(f"local-{name}", State.COMPLETED, 0, now - timedelta(seconds=seconds), now,
                                          seconds))
    return Job.objects.get(pk=job.pk)


def test_seconds_of_a_cheap_node_cost_what_the_ledger_says_on_page_csv_and_cli_alike(logged_in, local_site):
    jobs = [_settled(local_site, name, seconds) for name, seconds in (("one", 1), ("two", 2), ("thirteen", 13))]
    assert [j.cost_amount for j in jobs] == [Decimal("0.0028"), Decimal("0.0056"), Decimal("0.0361")]
    spent = budgets.summary(local_site.budget).spent
    assert spent == Decimal("0.0445")

    browser = Client()
    browser.force_login(local_site.alice)
    page = browser.get(f"/jobs/{jobs[0].pk}/").content.decode()
    assert "cost <strong>0.0028 points</strong> (estimate 0.17)" in page
    listed = browser.get("/jobs/").content.decode()
    assert "0.0028 points" in listed and "0.036 points" in listed  # two significant digits

    usage_csv = browser.get(f"/projects/{local_site.project.slug}/usage/?format=csv").content.decode()
    rows = list(csv.DictReader(io.StringIO(usage_csv)))
    assert sum(Decimal(r["cost"]) for r in rows) == spent  # not 0.04, not 0.05: the ledger's 0.0445

    bar = browser.get(f"/projects/{local_site.project.slug}/budget-bar/").content.decode()
    assert "spent 0.044 " in bar  # two significant digits, as everywhere

    status = logged_in("status", str(jobs[0].pk))
    assert status.code == 0, status.err
    assert "cost: 0.0028 points" in status.out and "estimate: 0.17 points" in status.out
    exact = logged_in("--json", "status", str(jobs[0].pk)).json()["cost"]
    assert exact == {"amount": "0.0028", "unit": "points", "text": "0.0028 points"}
    budget = logged_in("budget", "vision")
    assert "spent:        0.044 points" in budget.out


def test_a_small_estimate_and_rate_are_shown_exactly_on_the_job_list_and_the_projects_clusters_page(local_site):
    from portal.catalog.models import HardwareType

    tiny = HardwareType.objects.create(cluster=local_site.cluster, slug="local-tiny", name="Local tiny", cpus_per_node=1,
                                       max_nodes=1, max_walltime_hours=12, rate=Decimal("0.0042"), rate_unit="points")
    job = submit_job(local_site.alice, JobRequest(project=local_site.project, name="tiny", script="true",
                                                                  hardware=tiny, walltime="01:00:00")).job
    Job.objects.filter(pk=job.pk).update(state=JobState.QUEUED)
    assert Job.objects.get(pk=job.pk).estimate_amount == Decimal("0.0042")

    browser = Client()
    browser.force_login(local_site.alice)
    listed = browser.get("/jobs/").content.decode()
    assert "≤ 0.0042 points" in listed and "≤ 0.00 " not in listed  # not "0.00", which reads as free
    clusters = browser.get(f"/projects/{local_site.project.slug}/clusters/").content.decode()
    assert "Local tiny — " in clusters and ", 0.0042 points/node-hour" in clusters
