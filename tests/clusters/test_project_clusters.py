"""A project's owners choose which granted clusters and hardware its members use, never beyond the grant."""

from __future__ import annotations

from decimal import Decimal

import pytest

from portal.audit.models import AuditEntry
from portal.catalog.models import HardwareType
from portal.catalog.queries import hardware_for_project
from portal.clusters.models import Allocation
from portal.jobs.actions.submit import prepare_job
from portal.jobs.actions.validation import JobRequest, SubmitError

pytestmark = pytest.mark.django_db


@pytest.fixture
def big(local_site):
    return HardwareType.objects.create(cluster=local_site.cluster, slug="local-big", name="Local big", cpus_per_node=2,
                                       max_nodes=1, rate=Decimal("50"), rate_unit="points")


def _request(site, hw):
    return JobRequest(project=site.project, name="x", script="true", hardware=hw, walltime="00:01:00")


def test_an_owner_stops_the_project_using_a_granted_hardware_type_and_its_members_no_longer_can(client, local_site, big):
    client.force_login(local_site.alice)
    allocation = Allocation.objects.get(project=local_site.project)
    page = client.get("/projects/vision/clusters/").content.decode()
    assert "Local big" in page and "Local CPU" in page
    answer = client.post("/projects/vision/clusters/", {"allocation": allocation.pk, "in_use": "on",
                                                        "hardware": [local_site.hardware.pk]}, follow=True)
    assert "Saved what vision uses on This machine." in answer.content.decode()
    assert list(hardware_for_project(local_site.project)) == [local_site.hardware]
    with pytest.raises(SubmitError, match="does not use Local big"):
        prepare_job(local_site.alice, _request(local_site, big), require_account=False)
    entry = AuditEntry.objects.get(action="allocation.usage")
    assert entry.actor == local_site.alice and entry.data["after"] == {"in_use": True, "unused": ["local-big"]}

    # The whole cluster off: nothing of it is offered or accepted.
    client.post("/projects/vision/clusters/", {"allocation": allocation.pk, "hardware": [local_site.hardware.pk]})
    assert not hardware_for_project(local_site.project).exists()
    with pytest.raises(SubmitError, match="does not use This machine"):
        prepare_job(local_site.alice, _request(local_site, local_site.hardware), require_account=False)
    assert "Local CPU" not in client.get("/jobs/new/").content.decode()
    # Another project on the same cluster is not affected.
    assert hardware_for_project(local_site.other).count() == 2


def test_hardware_beyond_what_site_admins_granted_cannot_be_chosen(client, local_site, big):
    allocation = Allocation.objects.get(project=local_site.project)
    allocation.hardware.set([local_site.hardware])  # the grant: Local CPU only
    client.force_login(local_site.alice)
    answer = client.post("/projects/vision/clusters/", {"allocation": allocation.pk, "in_use": "on",
                                                        "hardware": [local_site.hardware.pk, big.pk]}, follow=True)
    assert "is not granted to vision" in answer.content.decode()
    assert "Local big" not in client.get("/projects/vision/clusters/").content.decode()
    assert list(hardware_for_project(local_site.project)) == [local_site.hardware]
    assert not AuditEntry.objects.filter(action="allocation.usage").exists()


def test_members_see_the_choice_but_cannot_change_it_and_outsiders_get_404(client, local_site, make_user, big):
    from portal.projects.models import Membership, Role

    carol = make_user("carol")
    Membership.objects.create(user=carol, project=local_site.project, role=Role.MEMBER)
    allocation = Allocation.objects.get(project=local_site.project)
    client.force_login(carol)
    page = client.get("/projects/vision/clusters/").content.decode()
    assert "Local big" in page and 'name="hardware"' not in page
    answer = client.post("/projects/vision/clusters/", {"allocation": allocation.pk}, follow=True)
    assert "not allowed to manage project vision" in answer.content.decode()
    assert Allocation.objects.get(pk=allocation.pk).in_use
    client.force_login(local_site.mallory)
    assert client.get("/projects/vision/clusters/").status_code == 404
    nlp = Allocation.objects.get(project=local_site.other)
    client.force_login(local_site.alice)  # an allocation of another project through her own project's page: 404
    assert client.post("/projects/vision/clusters/", {"allocation": nlp.pk}).status_code == 404
    assert Allocation.objects.get(pk=nlp.pk).in_use
