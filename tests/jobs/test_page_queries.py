"""The pages a researcher opens most cost the same number of SQL queries with 50 jobs (or 50 events) as with 5.

A page whose query count grows with its rows (one query per job to show its hardware, one per event for its
actor) is what makes a busy project's page slow; counts are stable where timings are not.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from backends.base import JobRecord, State
from portal.api.tokens import issue_token
from portal.jobs import events, tracking, transitions
from portal.jobs.actions import submit as submit_actions
from portal.jobs.actions.sweeps import submit_sweep
from portal.jobs.actions.validation import JobRequest
from portal.jobs.causes import Cause
from portal.jobs.models import Job

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _no_dispatch(monkeypatch):
    monkeypatch.setattr(submit_actions, "enqueue_on_commit", lambda *task: None)


def _ended_jobs(site, count: int) -> list[Job]:
    """`count` jobs of alice that ran and were charged: half completed, half failed."""
    req = JobRequest(project=site.project, name="page", script="true", hardware=site.hardware, walltime="00:01:00")
    sweep = submit_sweep(site.alice, req, {"SEED": list(range(count))}, array=False)
    jobs = list(Job.objects.filter(group=sweep.group))
    now = timezone.now()
    Job.objects.filter(pk__in=[job.pk for job in jobs]).update(state="running", scheduler_id="x", started_at=now)
    for i, job in enumerate(jobs):
        tracking.finish_job(job.pk, JobRecord("x", State.COMPLETED if i % 2 else State.FAILED, i % 2 and 0 or 1,
                                              now - timedelta(minutes=1), now, 60))
    return jobs


def _queries(client, url: str, **extra) -> int:
    """The statements of a page's later visits, the fewer of two: a first visit may fill a cache later visits read
    (the session, the usage charts' entry of a new version), and a visit now and then pays for a write that is not
    the page's (one statement more, once in about six whole-suite runs, on a page that costs the same alone). A
    statement a page makes per row is made on every visit, so the fewer of two still grows with the rows."""
    client.get(url, **extra)
    counts = []
    for _ in range(2):
        with CaptureQueriesContext(connection) as ctx:
            response = client.get(url, **extra)
        assert response.status_code == 200, response.content[:500]
        counts.append(len(ctx.captured_queries))
    return min(counts)


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
            transitions.note(job, events.Event(Cause.OTHER, f"note {i}", actor=local_site.alice))

    notes(3)  # with "queued" and its ending: five events
    few, many = _grows(client, local_site, lambda: reverse("job-detail", args=[job.pk]), lambda: notes(45))
    assert job.events.count() == 50
    assert many == few


def test_a_job_page_costs_as_many_queries_with_250_output_files_as_with_5_and_pages_them(client, local_site):
    from portal.jobs.models import JobArtifact

    job = _ended_jobs(local_site, 1)[0]

    def files(start: int, end: int) -> None:
        JobArtifact.objects.bulk_create(JobArtifact(job=job, path=f"out/f{i:03d}.txt", size=i, stored_name=f"k/{i}")
                                        for i in range(start, end))

    files(0, 5)
    few, many = _grows(client, local_site, lambda: reverse("job-detail", args=[job.pk]), lambda: files(5, 250))
    assert many == few
    last = client.get(reverse("job-detail", args=[job.pk]) + "?outputs_page=3").content.decode()
    listed = last.split('id="artifact-list"')[1].split("</ul>")[0]
    assert "Files 201–250 of 250" in last and "out/f249.txt" in listed and "out/f199.txt" not in listed


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


# ------------------------------------------------------------------------ pages that list what grows (issue 17)


def _spread_over_months(jobs: list[Job]) -> None:
    """Each job ended in a month of its own: a usage row each."""
    now = timezone.now()
    for i, job in enumerate(jobs):
        Job.objects.filter(pk=job.pk).update(ended_at=now - timedelta(days=31 * i))


def test_the_job_list_costs_as_many_queries_with_50_jobs_as_with_5_and_on_its_next_page(client, local_site):
    _ended_jobs(local_site, 5)
    few, many = _grows(client, local_site, lambda: reverse("job-list"), lambda: _ended_jobs(local_site, 45))
    assert many == few
    page = client.get(reverse("job-list") + "?size=25").content.decode()
    after = int(page.split("after=", 1)[1].split("&", 1)[0].split('"', 1)[0])
    assert _queries(client, reverse("job-list") + f"?size=25&after={after}") == few
    assert _queries(client, reverse("job-list") + f"?project={local_site.project.slug}") == few + 1  # its id, read once


def test_the_job_list_costs_as_many_queries_for_a_page_of_100_as_for_a_page_of_25(client, local_site):
    _ended_jobs(local_site, 60)
    client.force_login(local_site.alice)
    client.get(reverse("job-list"))
    assert _queries(client, reverse("job-list") + "?size=100") == _queries(client, reverse("job-list") + "?size=25")


def test_a_job_page_costs_as_many_queries_when_its_project_has_50_jobs_as_with_5(client, local_site):
    job = _ended_jobs(local_site, 5)[0]
    few, many = _grows(client, local_site, lambda: reverse("job-detail", args=[job.pk]),
                       lambda: _ended_jobs(local_site, 45))
    assert many == few


def test_the_api_job_list_costs_as_many_queries_for_50_a_page_as_for_5_and_on_its_next_page(client, local_site):
    _ended_jobs(local_site, 60)
    token = issue_token(local_site.alice, name="pages", scopes=("read",))[1]
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    url = reverse("api-jobs")
    client.get(url, **headers)
    five = _queries(client, url + "?limit=5", **headers)
    assert _queries(client, url + "?limit=50", **headers) == five
    following = client.get(url + "?limit=50", **headers).json()["next"]
    assert _queries(client, following, **headers) == five


def test_the_project_page_costs_as_many_queries_with_40_members_as_with_1_and_names_a_page_of_them(
        client, local_site, make_user):
    from portal.projects.models import Membership, Role

    _ended_jobs(local_site, 5)

    def members() -> None:
        Membership.objects.bulk_create(Membership(user=make_user(f"member{i:02d}"), project=local_site.project,
                                                  role=Role.MEMBER) for i in range(40))

    few, many = _grows(client, local_site, lambda: reverse("project-detail", args=[local_site.project.slug]), members)
    assert many == few
    page = client.get(reverse("project-detail", args=[local_site.project.slug])).content.decode()
    assert "member00" in page and "member39" not in page
    assert reverse("project-members", args=[local_site.project.slug]) in page


def test_the_project_page_lists_its_newest_50_jobs_and_links_to_the_rest_in_the_job_list(client, local_site):
    jobs = _ended_jobs(local_site, 51)
    client.force_login(local_site.alice)
    page = client.get(reverse("project-detail", args=[local_site.project.slug])).content.decode()
    newest = max(job.pk for job in jobs)
    assert reverse("job-detail", args=[newest]) in page
    assert reverse("job-detail", args=[min(job.pk for job in jobs)]) + '"' not in page
    assert f"{reverse('job-list')}?project={local_site.project.slug}" in page


def test_the_usage_page_costs_as_many_queries_with_50_rows_as_with_5_and_pages_its_table(client, local_site,
                                                                                         monkeypatch):
    from portal.usage import views as usage_views

    _spread_over_months(_ended_jobs(local_site, 5))
    few, many = _grows(client, local_site, lambda: reverse("project-usage", args=[local_site.project.slug]),
                       lambda: _spread_over_months(_ended_jobs(local_site, 45)))
    assert many == few
    monkeypatch.setattr(usage_views, "TABLE_PAGE", 20)
    url = reverse("project-usage", args=[local_site.project.slug])
    first = client.get(url).content.decode()
    assert "Rows 1–20 of 45" in first and "?page=2" in first
    assert "Rows 41–45 of 45" in client.get(url + "?page=3").content.decode()
    csv = client.get(url + "?format=csv").content.decode().splitlines()
    assert len(csv) == 1 + 45  # the CSV has every row


def test_the_project_list_costs_as_many_queries_with_60_projects_as_with_2_and_pages_them(client, local_site,
                                                                                        make_user):
    from portal.budgets.models import Budget
    from portal.projects.models import Membership, Project, Role

    def projects() -> None:
        created = Project.objects.bulk_create(Project(slug=f"p{i:02d}", name=f"P {i:02d}") for i in range(60))
        Membership.objects.bulk_create(Membership(user=local_site.alice, project=p, role=Role.MEMBER) for p in created)
        Budget.objects.bulk_create(Budget(project=p, amount=Decimal("10"), unit="points") for p in created)

    few, many = _grows(client, local_site, lambda: reverse("project-list"), projects)
    assert many == few
    assert _queries(client, reverse("project-list") + "?page=3") == few
    assert _queries(client, reverse("dashboard")) == _queries(client, reverse("dashboard"))
    page = client.get(reverse("project-list")).content.decode()
    assert "Page 1 of 3" in page and "?page=2" in page
    assert reverse("project-list") in client.get(reverse("dashboard")).content.decode()


def test_the_dashboard_costs_as_many_queries_with_30_projects_as_with_1(client, local_site):
    from portal.budgets.models import Budget
    from portal.projects.models import Membership, Project, Role

    def projects() -> None:
        created = Project.objects.bulk_create(Project(slug=f"d{i:02d}", name=f"D {i:02d}") for i in range(30))
        Membership.objects.bulk_create(Membership(user=local_site.alice, project=p, role=Role.MEMBER) for p in created)
        Budget.objects.bulk_create(Budget(project=p, amount=Decimal("10"), unit="points") for p in created)

    few, many = _grows(client, local_site, lambda: reverse("dashboard"), projects)
    assert many == few


def test_notifications_cost_as_many_queries_with_120_as_with_5_and_page_to_the_oldest(client, local_site):
    from portal.notifications.models import Notification

    def notify(count: int) -> None:
        Notification.objects.bulk_create(Notification(user=local_site.alice, kind="ended", text=f"note {i}")
                                         for i in range(count))

    notify(5)
    few, many = _grows(client, local_site, lambda: reverse("notifications"), lambda: notify(115))
    assert many == few
    pages, url = [], reverse("notifications")
    while url:
        page = client.get(url).content.decode()
        pages.append(page)
        url = (reverse("notifications") + "?before=" + page.split("?before=", 1)[1].split('"', 1)[0]
               if "?before=" in page else None)
    assert len(pages) == 3
    assert "note 0<" in pages[-1] and "note 0<" not in pages[0]


def test_the_members_page_costs_as_many_queries_with_120_members_as_with_1_and_pages_them(client, local_site,
                                                                                        make_user):
    from django.contrib.auth import get_user_model

    from portal.projects.models import Membership, Role

    def members() -> None:
        users = get_user_model().objects.bulk_create(get_user_model()(username=f"m{i:03d}") for i in range(120))
        Membership.objects.bulk_create(Membership(user=u, project=local_site.project, role=Role.MEMBER) for u in users)

    url = lambda: reverse("project-members", args=[local_site.project.slug])  # noqa: E731
    few, many = _grows(client, local_site, url, members)
    assert many == few
    last = client.get(url() + "?page=3").content.decode()
    assert "Page 3 of 3" in last and 'data-user="m119"' in last and 'data-user="m000"' not in last


# ------------------------------------------------------------------------------- a sweep's points, a page at a time


def _sweep(site, monkeypatch, points: int, name: str = "grid") -> list[Job]:
    """A sweep of `points` points of alice's, job by job, in the order its page and the API list them."""
    from portal.jobs.actions import sweeps as sweep_actions

    monkeypatch.setattr(sweep_actions, "MAX_SWEEP_JOBS", max(points, sweep_actions.MAX_SWEEP_JOBS))  # as bench/ does
    req = JobRequest(project=site.project, name=name, script="true", hardware=site.hardware, walltime="00:01:00")
    group = submit_sweep(site.alice, req, {"SEED": list(range(points))}, array=False).group
    return list(Job.objects.filter(group=group).order_by("array_index", "pk"))


def _shown(page: str) -> list[int]:
    """The jobs whose rows a sweep's page shows, top to bottom."""
    return [int(part.split('"', 1)[0]) for part in page.split('<tr data-job="')[1:]]


def test_a_sweeps_page_and_its_api_answer_cost_as_many_queries_with_300_points_as_with_5(client, local_site,
                                                                                       monkeypatch):
    few, many = _sweep(local_site, monkeypatch, 5, "few")[0].group_id, _sweep(local_site, monkeypatch, 300)[0].group_id
    token = issue_token(local_site.alice, name="pages", scopes=("read",))[1]
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    client.force_login(local_site.alice)
    page, api = (lambda pk: reverse("job-group", args=[pk])), (lambda pk: reverse("api-sweep-detail", args=[pk]))
    client.get(page(few)), client.get(api(few), **headers)  # caches (sessions, the token's last use) warm
    counts = {
        "page": (_queries(client, page(few)), _queries(client, page(many)), _queries(client, page(many) + "?page=3")),
        "htmx": (_queries(client, page(few), HTTP_HX_REQUEST="true"),
                 _queries(client, page(many) + "?page=2", HTTP_HX_REQUEST="true")),
        "api": (_queries(client, api(few), **headers), _queries(client, api(many), **headers),
                _queries(client, client.get(api(many), **headers).json()["jobs_next"], **headers)),
    }
    print(counts)  # the figures README quotes
    assert all(len(set(each)) == 1 for each in counts.values()), counts


def test_page_2_of_a_300_point_sweep_shows_points_101_to_200_on_the_page_and_in_the_api(client, local_site,
                                                                                       monkeypatch):
    jobs = _sweep(local_site, monkeypatch, 300)
    client.force_login(local_site.alice)
    url = reverse("job-group", args=[jobs[0].group_id])
    first = client.get(url).content.decode()
    assert _shown(first) == [job.pk for job in jobs[:100]]
    assert "Points 1–100 of 300" in first and 'href="?page=2"' in first
    second = client.get(url + "?page=2").content.decode()
    assert _shown(second) == [job.pk for job in jobs[100:200]]
    assert "Points 101–200 of 300" in second and "grid-100<" in second and "grid-199<" in second
    assert f'hx-get="{url}?page=2"' in second  # the live refresh keeps to the page shown
    assert _shown(client.get(url + "?page=2", HTTP_HX_REQUEST="true").content.decode()) == [j.pk for j in jobs[100:200]]

    token = issue_token(local_site.alice, name="pages", scopes=("read",))[1]
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    answer = client.get(reverse("api-sweep-detail", args=[jobs[0].group_id]), **headers).json()
    assert [job["id"] for job in answer["jobs"]] == [job.pk for job in jobs[:100]] and answer["jobs_count"] == 300
    assert answer["jobs_previous"] is None
    answer = client.get(answer["jobs_next"], **headers).json()
    assert [job["id"] for job in answer["jobs"]] == [job.pk for job in jobs[100:200]]
    last = client.get(answer["jobs_next"], **headers).json()
    assert [job["id"] for job in last["jobs"]] == [job.pk for job in jobs[200:]] and last["jobs_next"] is None
    assert client.get(last["jobs_previous"], **headers).json()["jobs"] == answer["jobs"]


def test_the_totals_on_page_2_of_a_sweep_cover_every_point_of_it(client, local_site, monkeypatch):
    from portal.api import queries as api_queries
    from portal.budgets.display import amount_text as money_text
    from portal.jobs import views as job_views

    monkeypatch.setattr(job_views, "POINTS_PAGE", 10)
    monkeypatch.setattr(api_queries, "SWEEP_PAGE", 10)
    jobs = _sweep(local_site, monkeypatch, 25)
    now = timezone.now()
    ended = jobs[:4]  # all on page 1: two completed, two failed, each charged its minute
    Job.objects.filter(pk__in=[job.pk for job in ended]).update(state="running", scheduler_id="x", started_at=now)
    for i, job in enumerate(ended):
        tracking.finish_job(job.pk, JobRecord("x", State.COMPLETED if i % 2 else State.FAILED, 1 - i % 2,
                                              now - timedelta(minutes=1), now, 60))
    settled = sum(Job.objects.get(pk=job.pk).cost_amount for job in ended)
    reserved = sum(job.estimate_amount for job in jobs[4:])
    assert settled > 0 and reserved > 0

    client.force_login(local_site.alice)
    url = reverse("job-group", args=[jobs[0].group_id])
    second = client.get(url + "?page=2").content.decode()
    assert _shown(second) == [job.pk for job in jobs[10:20]]
    assert f"Sweep cost: <strong>{money_text(settled + reserved)} points</strong>" in second
    assert f"({money_text(settled)} settled, {money_text(reserved)} still reserved" in second
    assert "Completed: <strong>2</strong>" in second and "Failed: <strong>2</strong>" in second
    assert "Queued: <strong>21</strong>" in second
    assert "Cancel the sweep (21 not ended)" in second and "Re-run failed points (2)" in second
    # Every point shown on page 3 has ended, but the sweep has not: the page keeps following it.
    Job.objects.filter(pk__in=[job.pk for job in jobs[20:]]).update(state="cancelled")
    assert client.get(url + "?page=3", HTTP_HX_REQUEST="true").status_code == 200

    token = issue_token(local_site.alice, name="pages", scopes=("read",))[1]
    answer = client.get(reverse("api-sweep-detail", args=[jobs[0].group_id]) + "?offset=10",
                        HTTP_AUTHORIZATION=f"Bearer {token}").json()
    assert [job["id"] for job in answer["jobs"]] == [job.pk for job in jobs[10:20]] and answer["jobs_count"] == 25
    assert answer["estimate"]["amount"] == f"{sum(job.estimate_amount for job in jobs):.4f}"


# ------------------------------------------------------------------------------- the Data page, a page at a time


def test_the_data_page_costs_as_many_queries_with_300_files_and_datasets_as_with_5_and_pages_both(client, local_site):
    from portal.storage.models import Dataset, DatasetKind, StoredFile

    def files(start: int, end: int) -> None:
        stored = StoredFile.objects.bulk_create(
            StoredFile(project=local_site.project, path=f"data/f{i:03d}.bin", storage_name=f"x/{i}", size=i,
                       sha256="0" * 64, uploaded_by=local_site.alice) for i in range(start, end))
        Dataset.objects.bulk_create(Dataset(project=local_site.project, name=f"set{f.size:03d}", kind=DatasetKind.FILE,
                                            stored_file=f, size=f.size, sha256=f.sha256) for f in stored)

    files(0, 5)
    few, many = _grows(client, local_site, lambda: reverse("data"), lambda: files(5, 300))
    assert many == few
    # Page 2 of the files (with the project filter kept by the pager), and page 3 of the datasets.
    second = client.get(reverse("data") + f"?project={local_site.project.slug}&page=2").content.decode()
    file_table = second.split('id="file-table"')[1].split("</table>")[0]
    assert "Files 101–200 of 300" in second and "data/f100.bin" in file_table and "data/f099.bin" not in file_table
    assert f'href="?project={local_site.project.slug}&amp;page=3"' in second
    third = client.get(reverse("data") + "?datasets_page=3").content.decode()
    assert "Datasets 201–300 of 300" in third and "<code>set299</code>" in third and "<code>set199</code>" not in third


def test_the_data_page_costs_as_many_queries_for_a_member_of_20_projects_as_of_1_and_shows_each_ones_usage(
        client, local_site):
    """The storage box lists the quota use of every project (up to 20) one may upload to: each its own bytes, in
    statements that do not grow with the projects."""
    from portal.projects.models import Membership, Project, Role
    from portal.storage.models import StoredFile, UploadSession, UploadState

    def projects(start: int, end: int) -> None:
        for i in range(start, end):
            project = Project.objects.create(slug=f"p{i:02d}", name=f"Project {i}", storage_quota_bytes=10_000)
            Membership.objects.create(user=local_site.alice, project=project, role=Role.MEMBER)
            StoredFile.objects.create(project=project, path="a.bin", storage_name=f"q/{i}", size=100 + i,
                                      sha256="0" * 64, uploaded_by=local_site.alice)
            UploadSession.objects.create(project=project, path="b.bin", key=f"u/{i}", size=1000 + i, part_size=1000 + i,
                                         state=UploadState.OPEN, created_by=local_site.alice)

    projects(0, 1)
    few, many = _grows(client, local_site, lambda: reverse("data"), lambda: projects(1, 19))
    assert many == few
    box = client.get(reverse("data")).content.decode().split('id="storage-quotas"')[1].split("</ul>")[0]
    assert '<span class="font-monospace">p07</span>: 107 B of 9.8 KiB (1007 B uploading)' in box
    assert '<span class="font-monospace">p18</span>: 118 B of 9.8 KiB (1018 B uploading)' in box
