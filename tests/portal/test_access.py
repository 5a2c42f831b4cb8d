"""A member of project A never sees, cancels, downloads or spends anything of project B; roles are honoured."""

from __future__ import annotations

import pytest
from django.urls import reverse

from portal.budgets.models import Budget
from portal.jobs import tracking
from portal.jobs.actions.cancel import request_cancel
from portal.jobs.actions.submit import submit_job
from portal.jobs.actions.sweeps import submit_sweep
from portal.jobs.actions.validation import JobRequest
from portal.jobs.models import Job, JobState
from portal.projects.models import Membership, Role

pytestmark = pytest.mark.django_db


@pytest.fixture
def alices_job(local_site):
    return submit_job(local_site.alice, JobRequest(
        project=local_site.project, name="private", script="echo secret", hardware=local_site.hardware)).job


@pytest.mark.parametrize("view", ["job-detail", "job-status", "job-cancel"])
def test_another_projects_job_is_not_found(client, local_site, alices_job, view):
    client.force_login(local_site.mallory)
    response = client.post(reverse(view, args=[alices_job.pk])) if view == "job-cancel" else client.get(
        reverse(view, args=[alices_job.pk]))
    assert response.status_code == 404
    assert Job.objects.get(pk=alices_job.pk).state == JobState.QUEUED


def test_another_projects_logs_and_sweeps_are_not_found(client, local_site, alices_job):
    client.force_login(local_site.mallory)
    assert client.get(reverse("job-log", args=[alices_job.pk, "stdout"])).status_code == 404
    sweep = submit_sweep(local_site.alice, JobRequest(
        project=local_site.project, name="sw", script="true", hardware=local_site.hardware), {"X": [1, 2]})
    assert client.get(reverse("job-group", args=[sweep.group.pk])).status_code == 404


def test_lists_show_only_your_projects(client, local_site, alices_job):
    client.force_login(local_site.mallory)
    for url in (reverse("job-list"), reverse("dashboard"), reverse("project-list"), reverse("site-usage")):
        assert "private" not in client.get(url).content.decode() and "Vision lab" not in client.get(url).content.decode()
    assert client.get(reverse("project-detail", args=["vision"])).status_code == 404
    assert client.get(reverse("project-usage", args=["vision"])).status_code == 404
    assert client.get(reverse("project-members", args=["vision"])).status_code == 404


def test_a_viewer_reads_but_cannot_submit_cancel_or_manage(client, local_site, alices_job, make_user):
    viewer = make_user("vera")
    Membership.objects.create(user=viewer, project=local_site.project, role=Role.VIEWER)
    client.force_login(viewer)
    assert client.get(reverse("job-detail", args=[alices_job.pk])).status_code == 200
    client.post(reverse("job-cancel", args=[alices_job.pk]))
    assert Job.objects.get(pk=alices_job.pk).cancel_requested_at is None
    with pytest.raises(Exception, match="not allowed to submit"):
        submit_job(viewer, JobRequest(project=local_site.project, name="x", script="x",
                                                      hardware=local_site.hardware))
    assert client.get(reverse("project-budget", args=["vision"])).status_code == 403
    client.post(reverse("project-members", args=["vision"]), {"action": "add", "who": "mallory", "role": "owner"})
    assert not Membership.objects.filter(user=local_site.mallory, project=local_site.project).exists()


def test_a_member_cannot_cancel_someone_elses_job_but_an_admin_can(local_site, alices_job, make_user):
    from django.core.exceptions import PermissionDenied

    member, admin = make_user("mo"), make_user("ada")
    Membership.objects.create(user=member, project=local_site.project, role=Role.MEMBER)
    Membership.objects.create(user=admin, project=local_site.project, role=Role.ADMIN)
    with pytest.raises(PermissionDenied):
        request_cancel(alices_job, member)
    request_cancel(alices_job, admin)
    assert Job.objects.get(pk=alices_job.pk).state == JobState.CANCELLED


def test_an_owner_manages_members_and_the_budget_from_the_pages(client, local_site, make_user):
    make_user("bob")
    client.force_login(local_site.alice)
    client.post(reverse("project-members", args=["vision"]), {"action": "add", "who": "bob", "role": "member"})
    bob = Membership.objects.get(project=local_site.project, user__username="bob")
    assert bob.role == Role.MEMBER
    client.post(reverse("project-members", args=["vision"]), {"action": "role", "membership": bob.pk, "role": "admin"})
    assert Membership.objects.get(pk=bob.pk).role == Role.ADMIN
    response = client.post(reverse("project-budget", args=["vision"]),
                           {"amount": "250", "unit": "points", "period": "monthly", "strict": "on"})
    assert response.status_code == 302
    budget = Budget.objects.get(project=local_site.project)
    assert (budget.amount, budget.period, budget.strict) == (250, "monthly", True)
    # The last owner cannot be removed or demoted.
    owner = Membership.objects.get(project=local_site.project, user=local_site.alice)
    client.post(reverse("project-members", args=["vision"]), {"action": "remove", "membership": owner.pk})
    assert Membership.objects.filter(pk=owner.pk).exists()


def test_usage_page_and_csv_show_settled_costs(client, local_site, alices_job):
    from datetime import timedelta

    from django.utils import timezone

    from backends.base import JobRecord, State

    Job.objects.filter(pk=alices_job.pk).update(state=JobState.RUNNING, scheduler_id="x", started_at=timezone.now())
    now = timezone.now()
    tracking.finish_job(alices_job.pk, JobRecord("x", State.COMPLETED, 0, now - timedelta(hours=1), now, 3600))
    client.force_login(local_site.alice)
    page = client.get(reverse("project-usage", args=["vision"])).content.decode()
    assert "10.00 points" in page and 'id="usage-data"' in page
    csv = client.get(reverse("project-usage", args=["vision"]) + "?format=csv").content.decode().splitlines()
    assert csv[0] == "month,project,cluster,hardware,user,jobs,node_hours,cost,unit"
    assert csv[1].endswith(",vision,local,local-cpu,alice,1,1.00,10.0000,points")  # exact, as the ledger


def test_the_site_admin_page_is_for_staff_and_lists_clusters_and_hardware(client, local_site, make_user):
    client.force_login(local_site.alice)
    assert client.get(reverse("site-admin")).status_code == 302  # to the admin login: not staff
    client.force_login(make_user("root", staff=True))
    page = client.get(reverse("site-admin")).content.decode()
    assert "This machine" in page and "Local CPU" in page and "10.00 points/node-h" in page
    # Health checks run in the site's operations project, once a site admin sets it up on this page (issue 25).
    assert "template=gpu-health" not in page and "set up This machine" in page
    from portal.clusters.actions import set_up_operations

    set_up_operations(local_site.cluster)
    page = client.get(reverse("site-admin")).content.decode()
    assert "template=gpu-health&amp;hardware=local-cpu&amp;project=site-ops" in page


def test_the_budget_bar_refreshes_for_members_only(client, local_site, alices_job):
    client.force_login(local_site.alice)
    bar = client.get(reverse("project-budget-bar", args=["vision"])).content.decode()
    assert "90.00</strong> points available" in bar and "reserved 10.00" in bar
    client.force_login(local_site.mallory)
    assert client.get(reverse("project-budget-bar", args=["vision"])).status_code == 404


def test_a_service_account_name_the_login_node_would_not_take_is_refused_on_the_site_page_and_sets_nothing_up(
        client, local_site, make_user):
    from portal.clusters.models import Allocation, Cluster, ClusterAccount, Kind

    Cluster.objects.create(slug="slurm", name="Slurm", kind=Kind.SLURM, login_host="login.example.org")
    client.force_login(make_user("root", staff=True))
    response = client.post("/site/health-checks/slurm/set-up/", {"slurm-username": "ops; rm -rf ~", "slurm-group": "x y"},
                           follow=True)
    page = response.content.decode()
    assert "Slurm: Service account:" in page and "Group: letters, digits" in page
    assert not ClusterAccount.objects.exists() and not Allocation.objects.filter(project__operations=True).exists()
    response = client.post("/site/health-checks/slurm/set-up/", {"slurm-username": "kkops", "slurm-group": "kkops"},
                           follow=True)
    account = ClusterAccount.objects.get(cluster__slug="slurm", project__slug="site-ops")
    assert account.username == "kkops" and account.public_key in response.content.decode()
    assert Allocation.objects.get(project__slug="site-ops", cluster__slug="slurm").group == "kkops"
