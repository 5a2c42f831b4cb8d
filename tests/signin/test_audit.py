"""The audit log says who did what from where for every state-changing action, and site admins read and filter it
at /site/audit/ (and in the Django admin)."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from portal.api.models import ApiToken
from portal.audit.models import AuditEntry
from portal.jobs.models import Job
from portal.projects.models import Membership
from tests.api.conftest import job_body

pytestmark = pytest.mark.django_db


def _client_from(addr: str, user=None) -> Client:
    client = Client(REMOTE_ADDR=addr)
    if user is not None:
        client.force_login(user)
    return client


def test_each_state_changing_action_is_recorded_with_its_actor_and_address(local_site, make_user, django_capture_on_commit_callbacks):
    alice, bob = local_site.alice, make_user("bob")
    root = make_user("root", staff=True)
    root.is_superuser = True
    root.save()
    by_alice = _client_from("192.0.2.10", alice)
    done: dict[str, str] = {}  # action -> the address it came from

    by_alice.post("/settings/tokens/", {"name": "laptop", "scopes": ["read", "submit"], "expires_in_days": "30"})
    done["api_token.issue"] = "192.0.2.10"
    token = ApiToken.objects.get(name="laptop")
    by_alice.post(f"/settings/tokens/{token.pk}/revoke/")
    done["api_token.revoke"] = "192.0.2.10"

    by_alice.post("/projects/vision/members/", {"action": "add", "who": "bob", "role": "member"})
    done["membership.add"] = "192.0.2.10"
    membership = Membership.objects.get(user=bob)
    by_alice.post("/projects/vision/members/", {"action": "role", "membership": membership.pk, "role": "viewer"})
    done["membership.role"] = "192.0.2.10"
    by_alice.post("/projects/vision/members/", {"action": "remove", "membership": membership.pk})
    done["membership.remove"] = "192.0.2.10"
    by_alice.post("/projects/vision/budget/", {"amount": "250", "unit": "points", "period": "once", "strict": "on"})
    done["budget.set"] = "192.0.2.10"

    from portal.api.tokens import issue_token

    _, secret = issue_token(alice, name="ci", scopes=["read", "submit"])
    automation = _client_from("198.51.100.20")
    bearer = {"HTTP_AUTHORIZATION": f"Bearer {secret}"}
    submitted = automation.post("/api/v1/jobs/", json.dumps(job_body()), content_type="application/json", **bearer)
    assert submitted.status_code == 201, submitted.content
    done["job.submit"] = "198.51.100.20"
    job = Job.objects.get()
    assert automation.post(f"/api/v1/jobs/{job.pk}/cancel/", **bearer).status_code in (200, 202)
    done["job.cancel"] = "198.51.100.20"

    by_root = _client_from("203.0.113.5", root)
    from portal.accounts.models import SiteSettings

    closed = by_root.post(f"/admin/accounts/sitesettings/{SiteSettings.current().pk}/change/",
                          {"signup_open": "", "reporting_unit": "JPY"})
    assert closed.status_code == 302, closed.content.decode()[:2000]
    done["admin.change"] = "203.0.113.5"
    visitor = _client_from("203.0.113.77")
    visitor.post("/accounts/login/", {"login": "bob", "password": "wrong"})
    done["auth.login_failed"] = "203.0.113.77"
    visitor.post("/accounts/login/", {"login": "bob", "password": "pw-for-tests-123"})
    done["auth.login"] = "203.0.113.77"
    visitor.post("/accounts/logout/")
    done["auth.logout"] = "203.0.113.77"

    for action, addr in done.items():
        rows = AuditEntry.objects.filter(action=action)
        assert rows.exists(), f"{action} was not recorded: {sorted(set(AuditEntry.objects.values_list('action', flat=True)))}"
        assert addr in {str(ip) for ip in rows.values_list("ip", flat=True)}, (action, list(rows.values_list("ip", flat=True)))
    assert AuditEntry.objects.get(action="budget.set").actor == alice
    change = AuditEntry.objects.get(action="admin.change")
    assert change.actor == root and change.data["model"] == "sitesettings" and "Signup open" in change.data["change"]
    assert AuditEntry.objects.filter(action="auth.login", actor=bob).exists()


@pytest.fixture
def history(local_site, make_user):
    from portal.audit.actions import record

    # The site's own setting-up (grants of its clusters, audited as access.grant) is not this history.
    AuditEntry.objects.all().delete()
    root = make_user("root", staff=True)
    root.is_superuser = True
    root.save()
    rows = [
        ("job.submit", local_site.alice, local_site.project, "192.0.2.10"),
        ("job.cancel", local_site.alice, local_site.project, "192.0.2.10"),
        ("job.submit", local_site.mallory, local_site.other, "198.51.100.20"),
        ("auth.login_failed", None, None, "203.0.113.77"),
    ]
    for action, actor, project, ip in rows:
        entry = record(action, actor=actor, project=project)
        AuditEntry.objects.filter(pk=entry.pk).update(ip=ip)
    return root


def _listed(response) -> list[tuple[str, str]]:
    """(action, address) of each row the page lists."""
    import re

    table = response.content.decode().split('id="audit-table"')[1]
    return re.findall(r"<td><code>([^<]+)</code></td>\s*<td><code>([^<]+)</code></td>", table.replace("\n    ", ""))


def test_a_site_admin_reads_and_filters_the_audit_log(client, history):
    client.force_login(history)  # itself recorded: auth.login by root
    everything = client.get("/site/audit/")
    assert everything.status_code == 200 and "5 entries" in everything.content.decode()
    page = everything.content.decode()
    assert "198.51.100.20" in page and "mallory" in page and "auth.login_failed" in page

    by_person = client.get("/site/audit/", {"actor": "alice"}).content.decode()
    assert "2 entries" in by_person and "mallory" not in by_person
    by_area = client.get("/site/audit/", {"action": "job."}).content.decode()
    assert "3 entries" in by_area and "auth.login_failed" not in by_area
    one_action = client.get("/site/audit/", {"action": "job.cancel"}).content.decode()
    assert "1 entry" in one_action
    by_project = client.get("/site/audit/", {"project": "nlp"}).content.decode()
    assert "1 entry" in by_project and "mallory" in by_project
    by_address = client.get("/site/audit/", {"ip": "203.0.113.77"}).content.decode()
    assert "1 entry" in by_address and "auth.login_failed" in by_address
    from django.utils import timezone

    today = timezone.now().date().isoformat()
    assert "5 entries" in client.get("/site/audit/", {"since": today, "until": today}).content.decode()
    assert "0 entries" in client.get("/site/audit/", {"until": "2020-01-01"}).content.decode()
    bad = client.get("/site/audit/", {"ip": "not-an-address"})
    assert bad.status_code == 400 and "Enter a valid IPv4 or IPv6 address" in bad.content.decode()
    # The same rows in the Django admin, filterable there too.
    admin = client.get("/admin/audit/auditentry/", {"action": "job.submit", "ip": "198.51.100.20"})
    assert admin.status_code == 200 and "1 audit entry" in admin.content.decode()


def test_researchers_cannot_see_the_audit_log(client, history, local_site):
    client.force_login(local_site.alice)
    assert client.get("/site/audit/").status_code == 404
    client.logout()
    response = client.get("/site/audit/")
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")
