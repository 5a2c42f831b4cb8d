"""The usage pages are computed once per version of the data and cached (portal.usage.queries.usage): what a user
sees is still what the settled jobs say, at once, and only for the projects they may see."""

from __future__ import annotations

import csv
import io
from datetime import timedelta
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone

from backends.base import JobRecord, State
from portal.budgets.models import UnitConversion
from portal.jobs import tracking
from portal.jobs.actions import submit as submit_actions
from portal.jobs.actions.sweeps import submit_sweep
from portal.jobs.actions.validation import JobRequest
from portal.jobs.models import Job
from portal.usage.queries import usage_rows

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _no_dispatch(monkeypatch):
    monkeypatch.setattr(submit_actions, "enqueue_on_commit", lambda *task: None)


def _ended_jobs(site, count: int, seconds: int = 60) -> list[Job]:
    """`count` jobs of alice that ran `seconds` and were charged through the tracker, as the scheduler's report."""
    req = JobRequest(project=site.project, name="usage", script="true", hardware=site.hardware, walltime="00:01:00")
    sweep = submit_sweep(site.alice, req, {"SEED": list(range(count))}, array=False)
    jobs = list(Job.objects.filter(group=sweep.group))
    now = timezone.now()
    Job.objects.filter(pk__in=[job.pk for job in jobs]).update(state="running", scheduler_id="x", started_at=now)
    for job in jobs:
        tracking.finish_job(job.pk, JobRecord("x", State.COMPLETED, 0, now - timedelta(seconds=seconds), now, seconds))
    return jobs


def _csv(client, url: str) -> list[dict]:
    return list(csv.DictReader(io.StringIO(client.get(url + "?format=csv").content.decode())))


def _shown(client, url: str) -> tuple[int, Decimal]:
    """Jobs and cost the page's table shows (its rows, as the page had them to render)."""
    response = client.get(url)
    assert response.status_code == 200
    rows = response.context["rows"]
    return sum(r.jobs for r in rows), sum((r.cost for r in rows), Decimal(0))


def test_a_job_settled_after_the_usage_page_was_read_shows_on_it_at_once(client, local_site):
    _ended_jobs(local_site, 5)
    client.force_login(local_site.alice)
    url = reverse("project-usage", args=[local_site.project.slug])
    before = _shown(client, url)
    assert _shown(client, url) == before  # read again: from the cache
    assert before[0] == 5

    [job] = _ended_jobs(local_site, 1, seconds=3600)

    job.refresh_from_db()
    assert job.cost_amount == Decimal("10")  # an hour of one node at 10 points
    assert _shown(client, url) == (6, before[1] + job.cost_amount)
    rows = _csv(client, url)
    assert sum(int(r["jobs"]) for r in rows) == 6
    assert sum(Decimal(r["cost"]) for r in rows) == before[1] + job.cost_amount
    site_rows = _csv(client, reverse("site-usage"))
    assert sum(int(r["jobs"]) for r in site_rows) == 6


def test_a_changed_unit_conversion_shows_on_the_site_usage_page_at_once(client, local_site, settings):
    settings.KAKEHASHI_REPORTING_UNIT = "JPY"
    conversion = UnitConversion.objects.create(from_unit="points", to_unit="JPY", factor=Decimal("2"))
    _ended_jobs(local_site, 1, seconds=3600)
    client.force_login(local_site.alice)
    url = reverse("site-usage")
    assert _shown(client, url) == (1, Decimal("20"))

    conversion.factor = Decimal("3")
    conversion.save()

    assert _shown(client, url) == (1, Decimal("30"))
    [row] = _csv(client, url)
    assert (Decimal(row["cost"]), row["unit"]) == (Decimal("30"), "JPY")
    # The very text the rows computed without a cache give (scale and all).
    [fresh] = usage_rows(Job.objects.filter(project=local_site.project), "JPY")
    assert row["cost"] == str(fresh.cost)


def test_the_usage_cached_for_one_user_is_never_shown_to_another(client, local_site, make_user):
    _ended_jobs(local_site, 3)
    admin = make_user("admin")
    admin.is_staff = True
    admin.save()
    for user in (local_site.alice, admin):  # both pages computed and cached first
        client.force_login(user)
        assert _shown(client, reverse("site-usage"))[0] == 3

    client.force_login(local_site.mallory)

    assert _shown(client, reverse("site-usage")) == (0, Decimal(0))
    assert _csv(client, reverse("site-usage")) == []
    assert client.get(reverse("project-usage", args=[local_site.project.slug])).status_code == 404


def test_the_usage_version_reads_only_columns_of_the_index_the_usage_sums_come_from():
    from portal.jobs.models import USAGE_COLUMNS
    from portal.usage.queries import VERSION_COLUMNS

    index = next(i for i in Job._meta.indexes if i.name == "job_project_newest")
    covered = {Job._meta.get_field(name).attname for name in [*index.fields, *index.include, "id"]
               if not name.startswith("-")} | {"id"}
    assert set(VERSION_COLUMNS) <= covered
    assert set(index.include) == set(USAGE_COLUMNS)
