"""Access changes a site admin makes in the Django admin are in the audit log: who granted a project a cluster,
who limited the hardware it may use there, who revoked it, from which address; and the audit page shows them."""

from __future__ import annotations

import pytest
from django.urls import reverse

from portal.audit.models import AuditEntry
from portal.catalog.models import HardwareType
from portal.clusters.models import Allocation, Cluster

pytestmark = pytest.mark.django_db


@pytest.fixture
def gpu_cluster(local_site):
    cluster = Cluster.objects.create(slug="gpu", name="GPU cluster", kind="local")
    small = HardwareType.objects.create(cluster=cluster, slug="gpu-small", name="Small GPU", gpus_per_node=1)
    big = HardwareType.objects.create(cluster=cluster, slug="gpu-big", name="Big GPU", gpus_per_node=8)
    AuditEntry.objects.all().delete()  # the site's own setup (local_site's grants) is not what these tests read
    return cluster, small, big


def _access_entries():
    return list(AuditEntry.objects.filter(action__startswith="access.").order_by("id"))


def test_granting_a_cluster_to_a_project_in_the_admin_is_audited(admin_client, admin_user, local_site, gpu_cluster):
    cluster, small, _ = gpu_cluster
    response = admin_client.post(reverse("admin:clusters_allocation_add"), {
        "project": local_site.project.pk, "cluster": cluster.pk, "group": "kkgpu", "hardware": [small.pk],
    }, REMOTE_ADDR="192.0.2.7")
    assert response.status_code == 302, response.content.decode()[:2000]
    allocation = Allocation.objects.get(project=local_site.project, cluster=cluster)
    entries = _access_entries()
    assert [e.action for e in entries] == ["access.grant", "access.hardware"], [(e.action, e.data) for e in entries]
    grant, restrict = entries
    assert grant.action == "access.grant" and grant.actor == admin_user and grant.ip == "192.0.2.7"
    assert grant.project == local_site.project and grant.target_id == str(allocation.pk)
    assert grant.data == {"cluster": "gpu", "group": "kkgpu"}
    assert restrict.action == "access.hardware" and restrict.actor == admin_user
    assert restrict.data == {"cluster": "gpu", "added": ["gpu-small"], "allowed": ["gpu-small"]}


def test_restricting_the_hardware_of_a_grant_is_audited_with_what_is_allowed_now(admin_client, admin_user, local_site,
                                                                                gpu_cluster):
    cluster, small, big = gpu_cluster
    allocation = Allocation.objects.create(project=local_site.project, cluster=cluster, group="kkgpu")
    allocation.hardware.set([small, big])
    AuditEntry.objects.all().delete()
    response = admin_client.post(reverse("admin:clusters_allocation_change", args=[allocation.pk]), {
        "project": local_site.project.pk, "cluster": cluster.pk, "group": "kkgpu", "hardware": [small.pk],
    })
    assert response.status_code == 302
    (restrict,) = _access_entries()
    assert restrict.action == "access.hardware" and restrict.actor == admin_user
    assert restrict.project == local_site.project
    assert restrict.data == {"cluster": "gpu", "removed": ["gpu-big"], "allowed": ["gpu-small"]}
    # The admin page that shows the log finds it by action.
    page = admin_client.get(reverse("site-audit"), {"action": "access."}).content.decode()
    assert "access.hardware" in page


def test_revoking_a_cluster_from_a_project_is_audited(admin_client, admin_user, local_site, gpu_cluster):
    cluster, _, _ = gpu_cluster
    allocation = Allocation.objects.create(project=local_site.project, cluster=cluster, group="kkgpu")
    AuditEntry.objects.all().delete()
    response = admin_client.post(reverse("admin:clusters_allocation_delete", args=[allocation.pk]), {"post": "yes"})
    assert response.status_code == 302
    assert not Allocation.objects.filter(pk=allocation.pk).exists()
    (revoke,) = _access_entries()
    assert revoke.action == "access.revoke" and revoke.actor == admin_user and revoke.project == local_site.project
    assert revoke.data == {"cluster": "gpu", "group": "kkgpu", "project_slug": "vision"}


def test_revoking_from_the_projects_admin_page_is_audited_too(admin_client, admin_user, local_site, gpu_cluster):
    cluster, _, _ = gpu_cluster
    project = local_site.project
    allocations = list(Allocation.objects.filter(project=project).order_by("pk"))
    AuditEntry.objects.all().delete()
    page = admin_client.get(reverse("admin:projects_project_change", args=[project.pk]))
    assert page.status_code == 200
    # The project page's inline: keep the memberships as they are, delete the allocation on the local cluster.
    data = {"slug": project.slug, "name": project.name, "description": "", "remind_after_hours": 24,
            "memberships-TOTAL_FORMS": 1, "memberships-INITIAL_FORMS": 1, "memberships-MIN_NUM_FORMS": 0,
            "memberships-MAX_NUM_FORMS": 1000}
    membership = project.memberships.get()
    data.update({"memberships-0-id": membership.pk, "memberships-0-project": project.pk,
                 "memberships-0-user": membership.user_id, "memberships-0-role": membership.role})
    data.update({"allocations-TOTAL_FORMS": len(allocations), "allocations-INITIAL_FORMS": len(allocations),
                 "allocations-MIN_NUM_FORMS": 0, "allocations-MAX_NUM_FORMS": 1000})
    for i, allocation in enumerate(allocations):
        data.update({f"allocations-{i}-id": allocation.pk, f"allocations-{i}-project": project.pk,
                     f"allocations-{i}-cluster": allocation.cluster_id, f"allocations-{i}-group": allocation.group})
    data["allocations-0-DELETE"] = "on"
    response = admin_client.post(reverse("admin:projects_project_change", args=[project.pk]), data)
    assert response.status_code == 302, response.content.decode()[:3000]
    (revoke,) = _access_entries()
    assert revoke.action == "access.revoke" and revoke.actor == admin_user and revoke.project == project
    assert revoke.data["cluster"] == allocations[0].cluster.slug


def test_deleting_a_cluster_records_the_revocations_without_blocking_the_delete(admin_client, local_site, gpu_cluster):
    cluster, _, _ = gpu_cluster
    Allocation.objects.create(project=local_site.project, cluster=cluster)
    AuditEntry.objects.all().delete()
    response = admin_client.post(reverse("admin:clusters_cluster_delete", args=[cluster.pk]), {"post": "yes"})
    assert response.status_code == 302
    (revoke,) = _access_entries()
    assert revoke.project is None and revoke.data["project_slug"] == "vision"
    assert revoke.data["because"] == "Cluster deleted"
