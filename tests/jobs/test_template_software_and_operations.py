"""What a template needs and who runs as the site's service account, without a browser: the API refuses a
template job whose software cannot run it and names the software that can; only site staff's jobs in the
operations project run as its service account; the command that sets it up refuses a research project."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command

from portal.catalog.models import HardwareType, Software
from portal.clusters.connect import NoClusterAccount, account_for, accounts_for
from portal.clusters.models import Cluster, ClusterAccount, IdentityMode
from portal.jobs.actions.submit import prepare_job, submit_job
from portal.jobs.actions.validation import JobRequest, SubmitError
from portal.projects.models import Membership, Project, Role

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(client, local_site):
    from portal.api.tokens import issue_token

    def call(user, method: str, path: str, **kwargs):
        token = issue_token(user, name="t", scopes=["read", "submit"])[1]
        return getattr(client, method)(f"/api/v1/{path}", HTTP_AUTHORIZATION=f"Bearer {token}",
                                       content_type="application/json", **kwargs)

    return call


@pytest.mark.cluster
def test_a_template_job_through_the_api_without_torch_is_refused_naming_the_software_that_has_it(api, hpc_site):
    body = {"project": "vision", "name": "ddp", "hardware": "slurm-a100x8", "template": "ddp-mnist", "dry_run": True}
    response = api(hpc_site.alice, "post", "jobs/", data=body)
    assert response.status_code == 400
    error = response.json()
    assert error["field"] == "software"
    assert error["detail"].startswith("template ddp-mnist needs torch: choose Software that provides it; on Slurm")
    assert "PyTorch 2.13 + papermill (modules)" in error["detail"]
    assert api(hpc_site.alice, "post", "jobs/", data={**body, "software": "pytorch-2-13"}).status_code == 200
    refused = api(hpc_site.alice, "post", "jobs/", data={**body, "software": "cuda-12-4"})
    assert refused.status_code == 400 and "does not provide" in refused.json()["detail"]
    listed = {s["slug"]: s["provides"] for s in api(hpc_site.alice, "get", "software/").json()["results"]}
    assert listed["pytorch-2-13"] == ["torch", "papermill"]


@pytest.mark.cluster
def test_where_no_software_provides_it_the_template_is_refused_saying_to_ask_the_site(hpc_site):
    Software.objects.update(provides=[])
    with pytest.raises(SubmitError, match="no software on Slurm \\(test cluster\\) provides torch for project "
                                                  "vision; ask the site admins"):
        prepare_job(hpc_site.alice, JobRequest(
            project=hpc_site.project, name="h", template="gpu-health",
            hardware=HardwareType.objects.get(slug="slurm-a100x8")), require_account=False)


def test_only_site_staff_run_as_the_operations_projects_service_account(local_site, make_user):
    cluster = Cluster.objects.create(slug="login", name="Login cluster", kind="slurm", login_host="127.0.0.1")
    call_command("service_account", "login", "ops")
    ops = Project.objects.get(slug="site-ops")
    assert ops.operations and ops.allocations.filter(cluster=cluster).exists()
    service = ClusterAccount.objects.get(cluster=cluster, project=ops)
    root = make_user("root", staff=True)
    assert account_for(cluster, root, ops) == service
    # A researcher who is a member of the operations project still needs an account of their own.
    Membership.objects.create(user=local_site.alice, project=ops, role=Role.MEMBER)
    with pytest.raises(NoClusterAccount, match="you have no account linked"):
        account_for(cluster, local_site.alice, ops)
    # Staff in a research project are not the site's service account either.
    with pytest.raises(NoClusterAccount, match="you have no account linked"):
        account_for(cluster, root, local_site.project)
    # Run again, the key is kept.
    call_command("service_account", "login", "ops")
    assert ClusterAccount.objects.get(pk=service.pk).public_key == service.public_key


def test_the_comparisons_one_query_finds_each_clusters_account_as_a_submit_would(local_site, make_user):
    """accounts_for (one query, for the comparison before Run) answers what account_for answers cluster by cluster:
    the researcher's own account, a project's service account, the operations account for staff only, or the same
    words for what is missing."""
    own = Cluster.objects.create(slug="own", name="Own accounts", kind="slurm", login_host="127.0.0.1")
    shared = Cluster.objects.create(slug="shared", name="Shared", kind="slurm", login_host="127.0.0.1",
                                    identity_mode=IdentityMode.PROJECT)
    unshared = Cluster.objects.create(slug="unshared", name="Unshared", kind="slurm", login_host="127.0.0.1",
                                      identity_mode=IdentityMode.PROJECT)
    call_command("service_account", "own", "ops")
    ops = Project.objects.get(slug="site-ops")
    ClusterAccount.objects.create(cluster=own, user=local_site.alice, username="alice", public_key="k")
    ClusterAccount.objects.create(cluster=shared, project=local_site.project, username="vision", public_key="k")
    root, carol = make_user("root", staff=True), make_user("carol")
    clusters = [own, shared, unshared, local_site.hardware.cluster]

    def one_by_one(user, project):
        found = {}
        for cluster in clusters:
            try:
                found[cluster.pk] = account_for(cluster, user, project)
            except NoClusterAccount as exc:
                found[cluster.pk] = str(exc)
        return found

    for user in (local_site.alice, root, carol):
        for project in (local_site.project, ops):
            at_once = {pk: str(found) if isinstance(found, NoClusterAccount) else found
                       for pk, found in accounts_for(clusters, user, project).items()}
            assert at_once == one_by_one(user, project), (user.username, project.slug)
    assert accounts_for(clusters, root, ops)[own.pk].project == ops  # staff run the site's checks as its account


def test_the_service_account_command_refuses_a_research_project(local_site):
    Cluster.objects.create(slug="login", name="Login cluster", kind="slurm", login_host="127.0.0.1")
    with pytest.raises(CommandError, match="project vision is a research project"):
        call_command("service_account", "login", "ops", "--project", "vision")
    assert not ClusterAccount.objects.exists()


def test_a_clone_whose_software_is_no_longer_offered_says_why_software_is_empty(client, local_site):
    from django.urls import reverse

    software = Software.objects.create(slug="old-env", name="Old env", kind="modules", modules=["old/1"])
    software.clusters.add(local_site.cluster)
    job = submit_job(local_site.alice, JobRequest(
        project=local_site.project, name="before", script="true", hardware=local_site.hardware,
        software=software)).job
    client.force_login(local_site.alice)
    page = client.get(reverse("job-new"), {"clone": job.pk}).content.decode()
    assert "Software is empty" not in page
    software.projects.add(local_site.other)  # now only for the other project
    page = client.get(reverse("job-new"), {"clone": job.pk}).content.decode()
    assert ("Software is empty: Old env is no longer offered to project vision on This machine. "
            "Choose other software.") in page
