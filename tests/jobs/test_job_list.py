"""The job list as a researcher uses it: filters, search, pages that stay cheap, durations and bulk cancel."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from portal.jobs import listing
from portal.jobs.actions.submit import submit_job
from portal.jobs.actions.validation import JobRequest
from portal.jobs.models import Job, JobState

pytestmark = pytest.mark.django_db


def _rows(response) -> list[str]:
    return re.findall(r'<tr data-job="(\d+)">', response.content.decode())


def _bulk(site, count: int, *, user=None, project=None, name="bulk", state=JobState.COMPLETED, **fields) -> list[Job]:
    project = project or site.project
    return Job.objects.bulk_create(Job(project=project, user=user or site.alice, cluster=site.cluster,
                                       hardware=site.hardware, name=f"{name}-{i}", walltime_seconds=600, script="true",
                                       state=state, **fields) for i in range(count))


def _submit(site, user, name: str) -> Job:
    request = JobRequest(project=site.project, name=name, script="sleep 60", hardware=site.hardware,
                                 walltime="00:10:00")
    return submit_job(user, request).job


def test_the_list_filters_by_project_cluster_state_and_name_and_searches_names_ids_and_users(client, local_site, make_user):
    train = _bulk(local_site, 2, name="train", state=JobState.RUNNING, scheduler_id="4242")
    evals = _bulk(local_site, 1, name="eval", state=JobState.FAILED)
    other = _bulk(local_site, 1, user=local_site.mallory, project=local_site.other, name="secret")
    client.force_login(local_site.alice)
    assert set(_rows(client.get("/jobs/"))) == {str(j.pk) for j in train + evals}  # never another project's
    assert _rows(client.get("/jobs/", {"state": "failed"})) == [str(evals[0].pk)]
    assert set(_rows(client.get("/jobs/", {"name": "train"}))) == {str(j.pk) for j in train}
    assert set(_rows(client.get("/jobs/", {"q": "4242"}))) == {str(j.pk) for j in train}
    assert set(_rows(client.get("/jobs/", {"q": "alice"}))) == {str(j.pk) for j in train + evals}
    assert _rows(client.get("/jobs/", {"q": str(evals[0].pk)})) == [str(evals[0].pk)]
    assert set(_rows(client.get("/jobs/", {"project": "vision", "cluster": "local"}))) == {str(j.pk) for j in train + evals}
    assert _rows(client.get("/jobs/", {"project": "nlp"})) == []  # a project she cannot see filters to nothing
    assert _rows(client.get("/jobs/", {"q": "secret"})) == [] and other
    assert "No jobs match these filters." in client.get("/jobs/", {"name": "zzz"}).content.decode()


def test_pages_go_back_by_id_without_repeats_and_cost_the_same_queries_whatever_their_size(client, local_site):
    jobs = _bulk(local_site, 130)
    client.force_login(local_site.alice)
    first = client.get("/jobs/", {"size": "25"})
    ids = _rows(first)
    assert ids == [str(j.pk) for j in sorted(jobs, key=lambda j: -j.pk)][:25]
    older = re.search(r'href="\?([^"]+)" rel="next"', first.content.decode()).group(1).replace("&amp;", "&")
    second = client.get("/jobs/?" + older)
    assert _rows(second) == [str(j.pk) for j in sorted(jobs, key=lambda j: -j.pk)][25:50]
    counts = []
    for size in ("25", "100"):
        with CaptureQueriesContext(connection) as queries:
            assert client.get("/jobs/", {"size": size}).status_code == 200
        counts.append(len(queries))
        # Never an offset; the one count (the list's "N jobs") stops at COUNT_LIMIT rows, whatever there are.
        assert not [q["sql"] for q in queries.captured_queries if "OFFSET" in q["sql"] or (
            "COUNT(" in q["sql"] and f"LIMIT {listing.COUNT_LIMIT + 1}" not in q["sql"])]
    assert counts[0] == counts[1], counts


def test_each_job_shows_how_long_it_ran_or_has_been_running(client, local_site):
    now = timezone.now()
    (done,) = _bulk(local_site, 1, name="done", started_at=now - timedelta(hours=2, minutes=5), ended_at=now)
    (running,) = _bulk(local_site, 1, name="running", state=JobState.RUNNING, started_at=now - timedelta(minutes=4))
    (queued,) = _bulk(local_site, 1, name="waiting", state=JobState.PENDING)
    client.force_login(local_site.alice)
    html = client.get("/jobs/").content.decode()
    cell = {pk: re.search(rf'<tr data-job="{pk}">.*?<td class="text-nowrap" data-duration>(.*?)</td>', html, re.S).group(1)
            for pk in (done.pk, running.pk, queued.pk)}
    assert cell[done.pk] == "2 h 05 min" and cell[running.pk].startswith("4 min") and cell[queued.pk] == ""


def test_bulk_cancel_cancels_only_the_jobs_the_user_may_cancel_and_names_the_others(client, local_site, make_user):
    from portal.projects.models import Membership, Role

    bob = make_user("bob")
    Membership.objects.create(user=bob, project=local_site.project, role=Role.MEMBER)
    mine = [_submit(local_site, bob, f"bob-{i}") for i in range(2)]
    alices = _submit(local_site, local_site.alice, "alice-job")
    (mallorys,) = _bulk(local_site, 1, user=local_site.mallory, project=local_site.other, state=JobState.RUNNING)
    client.force_login(bob)
    listed = client.get("/jobs/").content.decode()
    assert f'name="job" value="{alices.pk}"' not in listed  # a member cannot tick another person's job
    answer = client.post("/jobs/cancel/", {"job": [mine[0].pk, mine[1].pk, alices.pk, mallorys.pk],
                                           "next": "/jobs/?state=queued"}, follow=True)
    assert answer.redirect_chain[-1][0] == "/jobs/?state=queued"
    text = answer.content.decode()
    assert "Cancelling 2 job(s): bob-0, bob-1." in text and "Not cancelled" in text and "alice-job" in text
    assert [Job.objects.get(pk=j.pk).state for j in mine] == [JobState.CANCELLED] * 2
    assert Job.objects.get(pk=alices.pk).state == JobState.QUEUED
    assert Job.objects.get(pk=mallorys.pk).state == JobState.RUNNING  # not seen, not touched, not named
    assert "secret" not in text and str(mallorys.name) not in text
    assert client.post("/jobs/cancel/", {"job": [alices.pk], "next": "https://evil.example/"}).url == "/jobs/"
