"""The pages a researcher opens most cost the same number of SQL queries with 50 jobs (or 50 events) as with 5.

A page whose query count grows with its rows (one query per job to show its hardware, one per event for its
actor) is what makes a busy project's page slow; counts are stable where timings are not.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from backends.base import JobRecord, State
from portal.api.tokens import issue_token
from portal.jobs import actions, events, tracking
from portal.jobs.actions import JobRequest
from portal.jobs.actions import submit as submit_actions
from portal.jobs.models import Job

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _no_dispatch(monkeypatch):
    monkeypatch.setattr(submit_actions, "enqueue_on_commit", lambda *task: None)


def _ended_jobs(site, count: int) -> list[Job]:
    """`count` jobs of alice that ran and were charged: half completed, half failed."""
    req = JobRequest(project=site.project, name="page", script="true", hardware=site.hardware, walltime="00:01:00")
    sweep = actions.submit_sweep(site.alice, req, {"SEED": list(range(count))}, array=False)
    jobs = list(Job.objects.filter(group=sweep.group))
    now = timezone.now()
    Job.objects.filter(pk__in=[job.pk for job in jobs]).update(state="running", scheduler_id="x", started_at=now)
    for i, job in enumerate(jobs):
        tracking.finish_job(job.pk, JobRecord("x", State.COMPLETED if i % 2 else State.FAILED, i % 2 and 0 or 1,
                                              now - timedelta(minutes=1), now, 60))
    return jobs


def _queries(client, url: str, **extra) -> int:
    with CaptureQueriesContext(connection) as ctx:
        response = client.get(url, **extra)
    assert response.status_code == 200, response.content[:500]
    return len(ctx.captured_queries)


def _grows(client, site, url_of, more) -> tuple[int, int]:
    client.force_login(site.alice)
    url = url_of()
    client.get(url)  # caches (sessions, site settings, templates) warm
    few = _queries(client, url)
    more()
    return few, _queries(client, url)


def test_the_project_page_costs_as_many_queries_with_50_jobs_as_with_5(client, local_site):
    _ended_jobs(local_site, 5)
    few, many = _grows(client, local_site, lambda: reverse("project-detail", args=[local_site.project.slug]),
                       lambda: _ended_jobs(local_site, 45))
    assert many == few


def test_the_usage_pages_cost_as_many_queries_with_50_jobs_as_with_5(client, local_site):
    _ended_jobs(local_site, 5)
    few, many = _grows(client, local_site, lambda: reverse("project-usage", args=[local_site.project.slug]),
                       lambda: _ended_jobs(local_site, 45))
    assert many == few
    client.get(reverse("site-usage"))  # the site's settings row is created on first use
    site_few = _queries(client, reverse("site-usage"))
    _ended_jobs(local_site, 45)
    assert _queries(client, reverse("site-usage")) == site_few


def test_a_job_page_costs_as_many_queries_with_50_events_in_its_history_as_with_5(client, local_site):
    job = _ended_jobs(local_site, 1)[0]

    def notes(count: int) -> None:
        for i in range(count):
            events.noted(job, f"note {i}", actor=local_site.alice)

    notes(3)  # with "queued" and its ending: five events
    few, many = _grows(client, local_site, lambda: reverse("job-detail", args=[job.pk]), lambda: notes(45))
    assert job.events.count() == 50
    assert many == few


def test_the_api_job_list_costs_as_many_queries_with_50_jobs_as_with_5(client, local_site):
    _ended_jobs(local_site, 5)
    token = issue_token(local_site.alice, name="pages", scopes=("read",))[1]
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    url = reverse("api-jobs")
    client.get(url, **headers)
    few = _queries(client, url, **headers)
    _ended_jobs(local_site, 45)
    many = _queries(client, url, **headers)
    assert client.get(url, **headers).json()["count"] == 50
    assert many == few
