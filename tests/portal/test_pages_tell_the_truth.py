"""Pages say things as a person reads them: the audit log shows an access change's details as words and
comma-separated names, never Python's `['a100']` or `{'in_use': True}`."""

from __future__ import annotations

from decimal import Decimal

import pytest
from bs4 import BeautifulSoup
from django.urls import reverse

from portal.audit.models import AuditEntry
from portal.audit.templatetags.audit_data import audit_text
from portal.catalog.models import HardwareType
from portal.clusters.models import Allocation

pytestmark = pytest.mark.django_db


def test_audit_details_are_words_and_lists_not_python_text():
    assert audit_text(["a100", "h100"]) == "a100, h100"
    assert audit_text({"in_use": True, "unused": []}) == "in_use = yes, unused = none"
    assert audit_text({"before": {"in_use": False, "unused": ["big"]}, "n": None}) == \
        "before = (in_use = no, unused = big), n = —"
    assert audit_text([{"a": 1}, {"b": 2}]) == "(a = 1), (b = 2)"
    assert audit_text("all hardware of the cluster") == "all hardware of the cluster"
    assert audit_text(0.5) == "0.5"


def test_the_audit_log_shows_an_access_change_without_python_reprs(client, admin_client, local_site):
    big = HardwareType.objects.create(cluster=local_site.cluster, slug="local-big", name="Local big", cpus_per_node=2,
                                      max_nodes=1, rate=Decimal("50"), rate_unit="points")
    allocation = Allocation.objects.get(project=local_site.project)
    AuditEntry.objects.all().delete()
    # A site admin limits the project to one hardware type in the Django admin, then the owner stops using the other.
    response = admin_client.post(reverse("admin:clusters_allocation_change", args=[allocation.pk]), {
        "project": local_site.project.pk, "cluster": local_site.cluster.pk, "group": "", "in_use": "on",
        "hardware": [big.pk],
    })
    assert response.status_code == 302, response.content.decode()[:2000]
    allocation.hardware.set([big, local_site.hardware])
    client.force_login(local_site.alice)
    client.post("/projects/vision/clusters/", {"allocation": allocation.pk, "in_use": "on",
                                               "hardware": [local_site.hardware.pk]})
    actions = set(AuditEntry.objects.values_list("action", flat=True))
    assert {"access.hardware", "allocation.usage"} <= actions, actions

    page = BeautifulSoup(admin_client.get(reverse("site-audit")).content, "html.parser")
    rows = [(row.find_all("td")[3].get_text(strip=True), row.find_all("td")[6].get_text(" ", strip=True))
            for row in page.select("#audit-table tbody tr")]
    details = " | ".join(text for _, text in rows)
    assert "[" not in details and "{" not in details and "'" not in details and "True" not in details, details
    assert "added local-big" in details
    assert "allowed local-big, local-cpu" in details, rows
    (usage,) = [text for action, text in rows if action == "allocation.usage"]
    assert "before in_use = yes, unused = none" in usage and "after in_use = yes, unused = local-big" in usage, usage
