"""Authorization for every route of the URL configuration, against every kind of caller.

The routes are read from the URL configuration itself, so a route added tomorrow is walked the day it is added:
a route missing from the classification below fails the first test, and a project or own route missing from
WRITES (who may change what through it) fails another, until someone says what it is. The victim is project
"vision" (its owner alice, a member, a viewer and an admin); the callers are anonymous, mallory (owner of
another project), each role of vision, a site admin, and API tokens of each role with each scope, expired and
revoked. Sign-in routes are walked by mallory holding alice's ids, admin routes by non-staff users.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
import requests
from django.contrib import messages
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import transaction
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils import timezone

from portal.api.models import ApiToken
from portal.api.tokens import issue_token
from portal.audit.models import AuditEntry
from portal.budgets.models import Budget, LedgerEntry
from portal.clusters.models import Allocation, ClusterAccount
from portal.jobs import notebooks
from portal.jobs.actions.submit import submit_job
from portal.jobs.actions.sweeps import submit_sweep
from portal.jobs.actions.validation import JobRequest
from portal.jobs.models import Job, JobArtifact, JobGroup, JobState
from portal.notifications.models import Notification
from portal.projects.models import Membership, Role
from portal.sessions.actions import default_app
from portal.sessions.models import Session
from portal.storage import uploads
from portal.storage.models import Dataset, DatasetKind, Folder, StoredFile, UploadPart, UploadSession, UploadState

pytestmark = pytest.mark.django_db

# What each route is. PUBLIC and SIGN_IN routes hold no project's data; OWN routes show the caller their own
# things (listings, forms, their settings); PROJECT routes name one object of one project; STAFF routes are for
# site admins. Prefixes cover the sign-in library (allauth, MFA, SAML, OIDC, the hub's OAuth) and Django's admin.
PUBLIC = {"healthz", "api-schema", "api-docs", "hub-service-entry", "hub-service-entry-path", "api-fallback",
          # A session's server reporting its address from its node: no person's sign-in, only the server's own hub
          # token, recognised by its digest (tests/hub/test_sessions.py; portal/sessions/actions.record_address).
          "api-session-report"}
SIGN_IN_PREFIX, ADMIN_PREFIX = "accounts/", "admin/"
OWN = {
    "dashboard", "project-list", "job-list", "job-new", "job-preview", "job-presets", "site-usage", "data",
    "cluster-accounts", "cluster-account-link", "cluster-account-verify", "cluster-account-status", "api-tokens",
    "api-me", "api-projects", "api-clusters", "api-hardware", "api-software", "api-presets", "api-jobs", "api-sweeps",
    "api-jobs-batch",
    # Act only on what the caller may see: the ticked jobs they may cancel, their own notifications and settings,
    # the clusters of their projects, the places a project of theirs may run (?project= of another is 404).
    "job-bulk-cancel", "job-notebook", "cluster-health", "notifications", "notifications-read",
    "notification-preferences", "api-places",
    # Names a dataset in the project its body names, for those who may submit there (as api-datasets); the Data
    # page's file and dataset management acts on the project its body names, for those who may submit there.
    "data-datasets", "data-manage",
    # GPU efficiency of the caller's projects only (as site-usage).
    "site-gpu-efficiency",
    # Sessions: the caller's projects' sessions; New previews and asks the hub (the hub's spawner records it).
    "session-list", "session-new", "api-sessions",
    # What the caller may start a session with, and its price (the hub's spawn page asks both; the estimate also
    # through the hub's proxy): the caller's own projects only, nothing recorded.
    "api-session-choices", "api-session-estimate", "hub-session-estimate",
}
STAFF = {"site-admin", "site-audit", "site-health-set-up", "site-health-verify"}
# PROJECT routes: the URL arguments naming vision's object, and whether the route changes anything (POST).
PROJECT = {
    "project-detail": ("slug",), "project-members": ("slug",), "project-budget-bar": ("slug",),
    "project-budget": ("slug",), "project-usage": ("slug",), "job-detail": ("job",), "job-status": ("job",),
    "job-log": ("job", "stream"), "job-cancel": ("job",), "job-group": ("group",), "job-group-cancel": ("group",),
    "job-artifact": ("job", "artifact_id"), "data-download": ("file",), "api-token-revoke": ("token",),
    "api-project-detail": ("slug",), "api-budget": ("slug",), "api-files": ("slug",),
    "api-file-download": ("slug", "file"), "api-uploads": ("slug",), "api-upload": ("slug", "upload_id"),
    "api-upload-parts": ("slug", "upload_id"), "api-upload-complete": ("slug", "upload_id"),
    "api-upload-batch": ("slug",), "api-upload-batch-complete": ("slug",),
    "api-job-detail": ("job",), "api-job-cancel": ("job",), "api-job-logs": ("job",), "api-job-events": ("job",),
    "api-job-output": ("job", "artifact_id"), "api-sweep-detail": ("group",), "api-sweep-cancel": ("group",),
    "project-clusters": ("slug",), "job-group-rerun": ("group",), "job-executed-notebook": ("job",),
    "api-datasets": ("slug",), "api-dataset": ("slug", "dataset"),
    "api-files-move": ("slug",), "api-files-delete": ("slug",), "api-folders": ("slug",),
    "data-upload-abort": ("upload_id",),
    "project-idle-rule": ("slug",), "project-gpu-efficiency": ("slug",), "job-gpu": ("job",), "job-keep": ("job",), "api-job-samples": ("job",), "api-job-keep": ("job",),
    "session-stop": ("session",), "api-session-detail": ("session",), "api-session-stop": ("session",),
}
MARKERS = ("Vision lab", "secret-job", "secret-sweep", "vision-secret.txt", "vision-upload.bin", "alices-token",
           "secret-data", "secret_param", "secret-session")


def routes() -> list[tuple[str, str]]:
    """(route, name) of every URL pattern, walked through every include."""
    found = []

    def walk(resolver, prefix: str = "") -> None:
        for pattern in resolver.url_patterns:
            if isinstance(pattern, URLResolver):
                walk(pattern, prefix + str(pattern.pattern))
            elif isinstance(pattern, URLPattern):
                found.append((prefix + str(pattern.pattern), pattern.name or ("api-fallback" if prefix == "api/" else "")))

    walk(get_resolver())
    return found


def kind_of(route: str, name: str) -> str | None:
    if route.startswith(SIGN_IN_PREFIX) or route in ("admin/login/", "admin/logout/"):
        return "sign-in"
    if route.startswith(ADMIN_PREFIX):
        return "admin"
    for kind, names in (("public", PUBLIC), ("own", OWN), ("staff", STAFF), ("project", PROJECT)):
        if name in names:
            return kind
    return None


def test_every_route_of_the_url_configuration_is_classified():
    unclassified = [(route, name) for route, name in routes() if kind_of(route, name) is None]
    assert not unclassified, f"say who may use these routes (tests/security/test_authz_matrix.py): {unclassified}"
    named = {name for _, name in routes()}
    assert not (set(PROJECT) | OWN | STAFF) - named, "routes listed here that no longer exist"


# ------------------------------------------------------------------------------------------- the world


@pytest.fixture
def world(local_site, make_user):
    """Vision with a job of its owner and one of a member, a sweep, a job output, a file, an upload and a token;
    callers of every role."""
    from django.core.files.base import ContentFile
    from django.core.files.storage import default_storage

    site = local_site
    roles = {}
    for name, role in (("vera", Role.VIEWER), ("mike", Role.MEMBER), ("adam", Role.ADMIN)):
        roles[name] = make_user(name)
        Membership.objects.create(user=roles[name], project=site.project, role=role)
    site.viewer, site.member, site.admin = roles["vera"], roles["mike"], roles["adam"]
    site.staff = make_user("sam", staff=True)

    def job_request(user, name):
        return JobRequest(project=site.project, name=name, script="echo secret", hardware=site.hardware)

    site.job = submit_job(site.alice, job_request(site.alice, "secret-job")).job
    site.members_job = submit_job(site.member, job_request(site.member, "secret-job-2")).job
    site.group = submit_sweep(site.alice, job_request(site.alice, "secret-sweep"), {"X": [1, 2]}).group
    name = default_storage.save(f"test-artifacts/{site.job.pk}/result.txt", ContentFile(b"secret output"))
    site.artifact = JobArtifact.objects.create(job=site.job, path="result.txt", size=13, stored_name=name)
    executed = json.dumps(NOTEBOOK).encode()
    name = default_storage.save(f"test-artifacts/{site.job.pk}/executed.ipynb", ContentFile(executed))
    JobArtifact.objects.create(job=site.job, path=notebooks.EXECUTED_NOTEBOOK, size=len(executed), stored_name=name)
    key = default_storage.save("projects/vision/vision-secret.txt", ContentFile(b"secret"))
    site.file = StoredFile.objects.create(project=site.project, path="vision-secret.txt", storage_name=key, size=6,
                                          sha256="0" * 64, uploaded_by=site.alice)
    site.upload, _ = uploads.create_upload(site.alice, site.project, path="vision-upload.bin", size=10)
    site.dataset = Dataset.objects.create(project=site.project, name="secret-data", kind=DatasetKind.FILE,
                                          stored_file=site.file, size=6, sha256="0" * 64, created_by=site.alice)
    site.token, _ = issue_token(site.alice, name="alices-token", scopes=["read", "submit"])
    site.session_job = submit_job(site.alice, job_request(site.alice, "secret-session")).job
    Job.objects.filter(pk=site.session_job.pk).update(kind=Job.Kind.SESSION)
    Session.objects.create(job=site.session_job, app=default_app(), hub_user="alice",
                           server_name="secret-session", token_digest="0" * 64)
    return site


def url_of(route: str, world, args: tuple[str, ...], **overrides) -> str:
    values = {"slug": "vision", "job": world.job.pk, "stream": "stdout", "group": world.group.pk,
              "artifact_id": world.artifact.pk, "file": world.file.pk, "token": world.token.pk,
              "upload_id": world.upload.pk, "dataset": world.dataset.name, "session": world.session_job.pk,
              "service": "kakehashi", **overrides}
    names = iter(args)

    def fill(match: re.Match) -> str:
        # A PROJECT route's arguments in the order PROJECT lists them; any other by its own name (<str:service>).
        return str(values[next(names, None) or match.group(0).strip("<>").split(":")[-1]])

    return "/" + re.sub(r"<[^>]+>", fill, route)


def fingerprint() -> tuple:
    """Everything a request could change or spend: if it is equal before and after, nothing succeeded."""
    return (
        sorted(Job.objects.values_list("pk", "state", "cancel_requested_at", "project_id")),
        LedgerEntry.objects.count(), sorted(Budget.objects.values_list("pk", "amount")),
        sorted(Membership.objects.values_list("pk", "user_id", "project_id", "role")),
        sorted(StoredFile.objects.values_list("pk", "path", "size")),
        sorted((str(pk), state) for pk, state in UploadSession.objects.values_list("pk", "state")),
        sorted(ApiToken.objects.values_list("pk", "revoked_at")), JobGroup.objects.count(),
        sorted(Dataset.objects.values_list("pk", "name", "state")),
        sorted((a.pk, a.in_use, sorted(a.unused_hardware.values_list("pk", flat=True))) for a in Allocation.objects.all()),
        sorted(UploadPart.objects.values_list("session_id", "number", "sha256")),
        sorted(Notification.objects.values_list("pk", "read_at")),
        sorted(ClusterAccount.objects.values_list("pk", "user_id", "username", "public_key", "last_error")),
        AuditEntry.objects.exclude(action__in=("auth.login", "auth.logout")).count(),  # what was done, not who came
    )


def project_routes(world):
    for route, name in routes():
        if kind_of(route, name) == "project":
            yield name, url_of(route, world, PROJECT[name])


def _call(client, method: str, url: str, headers: dict | None = None):
    if method == "GET":
        return client.get(url, headers=headers or {})
    if method == "DELETE":
        return client.delete(url, headers=headers or {})
    return client.post(url, "{}", content_type="application/json", headers=headers or {})


# --------------------------------------------------------------------------------------- the outsiders


def test_anonymous_callers_get_a_sign_in_or_401_on_every_route_and_change_nothing(client, world):
    before = fingerprint()
    for route, name in routes():
        kind = kind_of(route, name)
        if kind in ("public", "sign-in"):
            continue
        url = url_of(route, world, PROJECT.get(name, ())) if kind == "project" else "/" + re.sub(
            r"<[^>]+>", "local", route) if "<" in route else "/" + route
        if "(?P" in url or "^" in url:
            continue
        for method in ("GET", "POST", "DELETE"):
            response = _call(client, method, url)
            label = f"anonymous {method} {url}"
            assert response.status_code in (302, 401, 403, 404, 405), f"{label}: {response.status_code}"
            if response.status_code == 302:
                assert "login" in response["Location"], f"{label}: {response['Location']}"
            assert not any(m in response.content.decode(errors="replace") for m in MARKERS), label
    assert fingerprint() == before


def _outsider_callers(client, world):
    """Mallory (owner of project nlp) through her session and through tokens of every scope."""
    yield "session", {}
    for scopes in (["read"], ["read", "submit"], ["admin"]):
        _, secret = issue_token(world.mallory, name="mallory", scopes=scopes)
        yield f"token {'+'.join(scopes)}", {"Authorization": f"Bearer {secret}"}


def test_a_member_of_another_project_gets_404_for_everything_of_this_one(client, world):
    client.force_login(world.mallory)
    callers = list(_outsider_callers(client, world))
    before = fingerprint()
    for caller, headers in callers:
        for _name, url in project_routes(world):
            if caller != "session" and not url.startswith("/api/"):
                continue
            for method in ("GET", "POST", "DELETE"):
                response = _call(client, method, url, headers)
                label = f"mallory ({caller}) {method} {url}"
                if response.status_code == 403:
                    # A token's scope is checked before anything is looked up: the same refusal for an object that
                    # does not exist, so it says nothing about this one.
                    twin_url = _missing_twin(url)
                    twin = _call(client, method, twin_url, headers)
                    same = twin.content.decode().replace(twin_url, url) == response.content.decode()
                    assert twin.status_code == 403 and same, f"{label}: 403 leaks existence"
                    continue
                assert response.status_code in (404, 405), f"{label}: {response.status_code}"
                assert not any(m in response.content.decode(errors="replace") for m in MARKERS), label
    assert fingerprint() == before


def _missing_twin(url: str) -> str:
    """The same URL naming objects that do not exist."""
    url = url.replace("/vision/", "/no-such-project/")
    url = re.sub(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "00000000-0000-4000-8000-000000000000", url)
    return re.sub(r"/\d+/", "/99999999/", url)


def test_listings_and_forms_never_show_another_projects_objects(client, world):
    client.force_login(world.mallory)
    _, secret = issue_token(world.mallory, name="mallory", scopes=["read"])
    for route, name in routes():
        if kind_of(route, name) not in ("own", "staff") or "<" in route:
            continue
        for headers in ({}, {"Authorization": f"Bearer {secret}"}):
            if headers and not route.startswith("api/"):
                continue
            response = client.get("/" + route, headers=headers)
            assert response.status_code in (200, 302, 400, 403, 404, 405), (route, response.status_code)
            body = response.content.decode(errors="replace")
            assert not any(m in body for m in MARKERS), f"{route} shows vision's objects to mallory"
            assert f'"id":{world.job.pk},' not in body.replace(" ", "")
    # Filters naming the other project are 404, not an empty list that confirms it exists.
    for url in ("/api/v1/jobs/?project=vision", "/api/v1/hardware/?project=vision", "/api/v1/presets/?project=vision"):
        assert client.get(url, headers={"Authorization": f"Bearer {secret}"}).status_code == 404, url


def test_ids_of_another_projects_objects_answer_like_ids_that_do_not_exist(client, world):
    """Probing ids tells nothing: another project's job and a job that never existed get the same answer."""
    _, secret = issue_token(world.mallory, name="mallory", scopes=["read", "submit"])
    headers = {"Authorization": f"Bearer {secret}"}
    missing = Job.objects.order_by("-pk").first().pk + 1000
    for template in ("/api/v1/jobs/{}/", "/api/v1/jobs/{}/logs/", "/api/v1/jobs/{}/events/", "/api/v1/sweeps/{}/"):
        theirs = client.get(template.format(world.job.pk if "jobs" in template else world.group.pk), headers=headers)
        nothing = client.get(template.format(missing), headers=headers)
        assert theirs.status_code == nothing.status_code == 404
        assert theirs.json()["code"] == nothing.json()["code"]
        assert re.sub(r"\d+", "N", theirs.json()["detail"]) == re.sub(r"\d+", "N", nothing.json()["detail"])
    client.force_login(world.mallory)
    for template in ("/jobs/{}/", "/jobs/groups/{}/", "/data/{}/download/"):
        theirs = client.get(template.format({"/jobs/{}/": world.job.pk, "/jobs/groups/{}/": world.group.pk,
                                             "/data/{}/download/": world.file.pk}[template]))
        assert theirs.status_code == client.get(template.format(missing)).status_code == 404
    # Uploads are named by random UUIDs, and even a known one is another project's 404.
    assert client.get(f"/api/v1/projects/nlp/uploads/{world.upload.pk}/", headers=headers).status_code == 404


def test_expired_and_revoked_tokens_open_nothing(client, world):
    expired_token, expired = issue_token(world.alice, name="old", scopes=["admin"],
                                         expires_at=timezone.now() + timedelta(seconds=1))
    ApiToken.objects.filter(pk=expired_token.pk).update(expires_at=timezone.now() - timedelta(minutes=1))
    revoked_token, revoked = issue_token(world.alice, name="gone", scopes=["admin"])
    ApiToken.objects.filter(pk=revoked_token.pk).update(revoked_at=timezone.now())
    before = fingerprint()
    for secret, code in ((expired, "token_expired"), (revoked, "token_revoked")):
        for route, name in routes():
            if not route.startswith("api/v1/"):
                continue
            url = url_of(route, world, PROJECT.get(name, ()))
            for method in ("GET", "POST", "DELETE"):
                response = _call(client, method, url, {"Authorization": f"Bearer {secret}"})
                assert response.status_code == 401 and response.json()["code"] == code, (method, url, response.content)
    assert fingerprint() == before


# ----------------------------------------------------------------------------------- roles and scopes


def test_a_viewer_cannot_cancel_submit_upload_or_manage(client, world):
    client.force_login(world.viewer)
    _, secret = issue_token(world.viewer, name="vera", scopes=["admin"])
    before = fingerprint()
    headers = {"Authorization": f"Bearer {secret}"}
    for url in (f"/api/v1/jobs/{world.job.pk}/cancel/", f"/api/v1/sweeps/{world.group.pk}/cancel/"):
        assert client.post(url, headers=headers).status_code == 403, url
    assert client.post("/api/v1/jobs/", {"project": "vision", "name": "x", "hardware": "local-cpu", "script": "true"},
                       content_type="application/json", headers=headers).status_code == 403
    assert client.post("/api/v1/projects/vision/uploads/", {"path": "x.bin", "size": 1},
                       content_type="application/json", headers=headers).status_code == 403
    assert client.delete(f"/api/v1/projects/vision/uploads/{world.upload.pk}/", headers=headers).status_code == 404
    for url in (f"/jobs/{world.job.pk}/cancel/", f"/jobs/groups/{world.group.pk}/cancel/"):
        client.post(url)
    client.post("/projects/vision/members/", {"action": "add", "who": "mallory", "role": "owner"})
    client.post("/projects/vision/budget/", {"amount": "999999"})
    client.post(f"/settings/tokens/{world.token.pk}/revoke/")
    assert fingerprint() == before


def test_a_member_cancels_their_own_job_but_not_someone_elses_and_an_admin_cancels_any(client, world):
    _, member = issue_token(world.member, name="mike", scopes=["read", "submit"])
    _, admin = issue_token(world.admin, name="adam", scopes=["read", "submit"])
    response = client.post(f"/api/v1/jobs/{world.job.pk}/cancel/", headers={"Authorization": f"Bearer {member}"})
    assert response.status_code == 403
    assert Job.objects.get(pk=world.job.pk).state == "queued"
    response = client.post(f"/api/v1/jobs/{world.members_job.pk}/cancel/", headers={"Authorization": f"Bearer {member}"})
    assert response.status_code in (200, 202)
    response = client.post(f"/api/v1/jobs/{world.job.pk}/cancel/", headers={"Authorization": f"Bearer {admin}"})
    assert response.status_code in (200, 202) and Job.objects.get(pk=world.job.pk).state == "cancelled"


@pytest.mark.parametrize("scopes, allowed", [(["read"], False), (["submit"], True), (["admin"], True)])
def test_a_tokens_scope_decides_whether_it_may_change_anything(client, world, scopes, allowed):
    _, secret = issue_token(world.alice, name="scoped", scopes=scopes)
    headers = {"Authorization": f"Bearer {secret}"}
    before = fingerprint()
    response = client.post(f"/api/v1/jobs/{world.job.pk}/cancel/", headers=headers)
    assert (response.status_code in (200, 202)) is allowed, response.content
    if not allowed:
        assert response.status_code == 403 and fingerprint() == before
        assert client.delete(f"/api/v1/projects/vision/uploads/{world.upload.pk}/", headers=headers).status_code == 403


def test_only_site_admins_reach_the_site_pages_and_the_django_admin(client, world):
    for user in (world.alice, world.admin, world.mallory):
        client.force_login(user)
        for url in ("/site/", "/site/audit/", "/admin/", "/admin/projects/project/"):
            response = client.get(url)
            assert response.status_code in (302, 403, 404), (user.username, url, response.status_code)
            if response.status_code == 302:
                assert "login" in response["Location"]
        for url in ("/site/health-checks/local/set-up/", "/site/health-checks/local/check/"):
            response = client.post(url, {"local-username": "kkops"})
            assert response.status_code in (302, 403, 404) and "login" in response.get("Location", "login"), url
    assert not Allocation.objects.filter(project__operations=True).exists()
    client.force_login(world.staff)
    assert client.get("/site/").status_code == 200


# ------------------------------------------------------------------------- every write, every role and scope
#
# What each PROJECT route (and each OWN route that acts on a project named in its body) lets whom change, in one
# table. Every PROJECT and OWN route has an entry: READ_ONLY (POST and DELETE change nothing, for anyone, however
# powerful), PERSONAL (it changes only the caller's own things: walked cross-user further down), or its writes:
# which roles of vision may (the others are refused with the status given, and nothing changes), and for API
# routes the token scope it needs (a token of any role with a narrower scope gets 403 insufficient_scope). A
# route added tomorrow without an entry fails test_every_project_and_own_route_has_a_write_rule.

ROLES = ("viewer", "member", "admin", "owner", "staff")  # owner = alice; staff = a site admin, member of nothing
SUBMITTERS = frozenset({"member", "admin", "owner", "staff"})
MANAGERS = frozenset({"admin", "owner", "staff"})  # manage the project and cancel anyone's jobs
HOLDER = frozenset({"owner"})  # the object is alice's own (her upload, her token): everyone else gets 404
READ_ONLY, PERSONAL = "read-only", "personal"
BACK_WITH_ERROR = 302  # a page that sends the caller back with an error message (checked) and changes nothing
_fresh = itertools.count()


@dataclass(frozen=True)
class Write:
    """One way a route changes something. `prepare` makes fresh objects (inside the case's savepoint) and returns
    the URL values naming them; `data` is the body; `done` says whether the change happened."""
    method: str
    may: frozenset[str]
    refused: int  # what the others get: 403, 404, BACK_WITH_ERROR, or 200/400 (the form again, with the error)
    done: Callable[[Any, dict, Any], bool]  # (world, prepared, actor's user) -> did it happen
    data: Callable[[Any, dict], dict] = lambda world, prepared: {}
    prepare: Callable[[Any], dict] = lambda world: {}
    scope: str = "submit"  # API routes: the token scope it needs
    form: bool = False  # an API route taking multipart/form-data (else JSON); pages always get a form
    disk: bool = False  # the portal stores the bytes itself: only without an object store (`make run`)


def _job_state(pk) -> str:
    return Job.objects.get(pk=pk).state


def _running(world) -> dict:
    """alice's job as the scheduler runs it (only a running job can be kept)."""
    Job.objects.filter(pk=world.job.pk).update(state=JobState.RUNNING, scheduler_id="4242")
    return {}


def _rule_threshold(project) -> float | None:
    from portal.samples.models import IdleRule

    return IdleRule.objects.filter(project=project).values_list("threshold_percent", flat=True).first()


def _keeps(pk) -> int:
    from portal.samples.models import JobSamples

    return JobSamples.objects.filter(job_id=pk).values_list("keeps", flat=True).first() or 0


def _failed_point(world) -> dict:
    point = world.group.jobs.order_by("pk").first()
    Job.objects.filter(pk=point.pk).update(state=JobState.FAILED)
    return {}


def _upload(world, *, sent: bool = False) -> dict:
    """A fresh 10-byte upload of alice's; `sent`: its one part signed and PUT to the store, ready to complete."""
    data = b"0123456789"
    session, _ = uploads.create_upload(world.alice, world.project, path=f"walk-{next(_fresh)}.bin", size=len(data),
                                       sha256=hashlib.sha256(data).hexdigest())
    if sent:
        part, = uploads.sign_parts(world.alice, session, [{"number": 1, "sha256": _b64sha(data)}])
        assert requests.put(part["url"], data=data, headers=part["headers"], timeout=30).status_code == 200
    return {"upload_id": session.pk, "upload": session}


def _batch_upload(world) -> dict:
    """A fresh 10-byte upload of alice's from a batch, PUT to the store, ready to complete."""
    from portal.storage import batch_uploads

    data = b"0123456789"
    answer, = batch_uploads.create_batch(world.alice, world.project, [
        {"path": f"walk-{next(_fresh)}.bin", "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}])
    assert requests.put(answer["url"], data=data, headers=answer["headers"], timeout=30).status_code == 200
    return {"upload_id": answer["id"]}


def _data_root(world) -> dict:
    Allocation.objects.filter(pk=world.allocation.pk).update(data_root="/srv/vision")
    return {}


def _path(world) -> dict:
    """A path never used before: the store keeps what a rolled-back case wrote."""
    return {"path": f"walk/{next(_fresh)}.txt"}


def _stored(world) -> dict:
    """A fresh file of vision's that no dataset names (the store's bytes are not needed to move or delete it)."""
    path = f"walk/{next(_fresh)}.txt"
    stored = StoredFile.objects.create(project=world.project, path=path, storage_name=f"projects/vision/{path}",
                                       size=6, sha256="0" * 64, uploaded_by=world.alice)
    return {"path": path, "file": stored}


def _b64sha(data: bytes) -> str:
    return base64.b64encode(hashlib.sha256(data).digest()).decode()


def _submit_body(world, name: str) -> dict:
    return {"project": "vision", "name": name, "hardware": "local-cpu", "walltime": "00:10:00", "script": "true"}


def _file(name: str) -> SimpleUploadedFile:
    return SimpleUploadedFile(name, b"walked", content_type="text/plain")


WRITES: dict[str, Any] = {
    # Pages of a project.
    "project-detail": READ_ONLY, "project-budget-bar": READ_ONLY, "project-usage": READ_ONLY,
    "project-members": [  # managing members: admins and owners
        Write("POST", MANAGERS, BACK_WITH_ERROR, data=lambda w, p: {"action": "add", "who": "nina", "role": "member"},
              done=lambda w, p, u: Membership.objects.filter(project=w.project, user__username="nina").exists()),
        Write("POST", MANAGERS, BACK_WITH_ERROR,
              data=lambda w, p: {"action": "role", "membership": w.viewer_membership.pk, "role": "member"},
              done=lambda w, p, u: Membership.objects.get(pk=w.viewer_membership.pk).role == Role.MEMBER),
        Write("POST", MANAGERS, BACK_WITH_ERROR,
              data=lambda w, p: {"action": "remove", "membership": w.viewer_membership.pk},
              done=lambda w, p, u: not Membership.objects.filter(pk=w.viewer_membership.pk).exists()),
    ],
    "project-clusters": [  # what the project uses of its grant: admins and owners
        Write("POST", MANAGERS, BACK_WITH_ERROR, data=lambda w, p: {"allocation": w.allocation.pk},
              done=lambda w, p, u: not Allocation.objects.get(pk=w.allocation.pk).in_use),
    ],
    "project-budget": [  # the budget: admins and owners; the page itself is 403 to the others
        Write("POST", MANAGERS, 403, data=lambda w, p: {"amount": "777", "unit": "points", "period": "monthly"},
              done=lambda w, p, u: Budget.objects.get(project=w.project).amount == 777),
    ],
    # Jobs and sweeps (alice's: for a member, someone else's). Cancelling others' jobs: project admins and owners
    # (and site admins); a member cancels only their own (test_a_member_cancels_their_own_job_…).
    "job-detail": READ_ONLY, "job-status": READ_ONLY, "job-log": READ_ONLY, "job-group": READ_ONLY,
    "job-artifact": READ_ONLY, "job-executed-notebook": READ_ONLY,
    "job-cancel": [Write("POST", MANAGERS, BACK_WITH_ERROR,
                         done=lambda w, p, u: _job_state(w.job.pk) == JobState.CANCELLED)],
    # The project's idle-GPU rule: its owners and admins (and site admins), as the budget.
    "project-idle-rule": [Write("POST", MANAGERS, 403, data=lambda w, p: {
        "threshold_percent": "7", "window_minutes": "90", "warn_at_minutes": "90", "action": "tell",
        "cancel_after_minutes": "120", "keep_max_hours": "12", "exempt_busy_gpus": "1"},
        done=lambda w, p, u: _rule_threshold(w.project) == 7)],
    # What a job's GPUs do: read by whoever sees the job. Keeping an idle job running: its owner only.
    "job-gpu": READ_ONLY, "api-job-samples": READ_ONLY, "project-gpu-efficiency": READ_ONLY,
    "job-keep": [Write("POST", HOLDER, BACK_WITH_ERROR, prepare=lambda w: _running(w), data=lambda w, p: {"hours": "1"},
                       done=lambda w, p, u: _keeps(w.job.pk) > 0)],
    "api-job-keep": [Write("POST", HOLDER, 403, prepare=lambda w: _running(w), data=lambda w, p: {"hours": 1},
                           done=lambda w, p, u: _keeps(w.job.pk) > 0)],
    "job-group-cancel": [Write("POST", MANAGERS, BACK_WITH_ERROR,
                               done=lambda w, p, u: not w.group.jobs.exclude(state=JobState.CANCELLED).exists())],
    # Re-running a sweep's failed points is a submit: anyone who may submit, and the new jobs are theirs.
    "job-group-rerun": [Write("POST", SUBMITTERS, BACK_WITH_ERROR, prepare=_failed_point,
                              done=lambda w, p, u: w.group.jobs.filter(user=u).exists())],
    # Files and datasets.
    "data-download": READ_ONLY, "api-file-download": READ_ONLY,
    # Renaming and deleting a dataset, moving, deleting and making files and folders: who may submit.
    "api-dataset": [
        Write("PATCH", SUBMITTERS, 403, data=lambda w, p: {"name": "walked-renamed"},
              done=lambda w, p, u: Dataset.objects.filter(name="walked-renamed").exists()),
        Write("DELETE", SUBMITTERS, 403, done=lambda w, p, u: not Dataset.objects.filter(pk=w.dataset.pk).exists()),
    ],
    "api-files-move": [Write("POST", SUBMITTERS, 403, prepare=lambda w: _stored(w),
                             data=lambda w, p: {"source": p["path"], "destination": p["path"] + ".moved"},
                             done=lambda w, p, u: StoredFile.objects.filter(path=p["path"] + ".moved").exists())],
    "api-files-delete": [Write("POST", SUBMITTERS, 403, prepare=lambda w: _stored(w),
                               data=lambda w, p: {"path": p["path"]},
                               done=lambda w, p, u: not StoredFile.objects.filter(path=p["path"]).exists())],
    "api-folders": [Write("POST", SUBMITTERS, 403, prepare=_path, data=lambda w, p: {"path": p["path"][:-4]},
                          done=lambda w, p, u: Folder.objects.filter(path=p["path"][:-4]).exists())],
    "data-manage": [Write("POST", SUBMITTERS, BACK_WITH_ERROR, prepare=_path,
                          data=lambda w, p: {"action": "mkdir", "project": "vision", "path": p["path"][:-4]},
                          done=lambda w, p, u: Folder.objects.filter(path=p["path"][:-4]).exists())],
    # An unfinished upload is aborted on the Data page by whoever started it (404 to everyone else).
    "data-upload-abort": [Write("POST", HOLDER, 404, prepare=_upload,
                                done=lambda w, p, u: UploadSession.objects.get(pk=p["upload_id"]).state
                                == UploadState.ABORTED)],
    "api-files": [Write("POST", SUBMITTERS, 403, form=True, disk=True, prepare=_path,
                        data=lambda w, p: {"file": _file("walk.txt"), "path": p["path"]},
                        done=lambda w, p, u: StoredFile.objects.filter(path=p["path"]).exists())],
    "api-datasets": [  # naming the project's files: who may submit; registering a path on a cluster: its admins
        Write("POST", SUBMITTERS, 403, data=lambda w, p: {"name": "walked", "path": "vision-secret.txt"},
              done=lambda w, p, u: Dataset.objects.filter(name="walked").exists()),
        Write("POST", MANAGERS, 403, prepare=_data_root,
              data=lambda w, p: {"name": "walked", "cluster": "local", "cluster_path": "/srv/vision/set"},
              done=lambda w, p, u: Dataset.objects.filter(name="walked").exists()),
    ],
    # Direct uploads: starting one is a submit; an upload session is its creator's alone (404 to everyone else,
    # site admins included).
    "api-uploads": [Write("POST", SUBMITTERS, 403, prepare=_path, data=lambda w, p: {"path": p["path"], "size": 10},
                          done=lambda w, p, u: UploadSession.objects.filter(path=p["path"]).exists())],
    "api-upload": [Write("DELETE", HOLDER, 404, prepare=_upload,
                         done=lambda w, p, u: UploadSession.objects.get(pk=p["upload_id"]).state == UploadState.ABORTED)],
    "api-upload-parts": [Write("POST", HOLDER, 404, prepare=_upload,
                               data=lambda w, p: {"parts": [{"number": 1, "sha256": _b64sha(b"0123456789")}]},
                               done=lambda w, p, u: UploadPart.objects.filter(session_id=p["upload_id"]).exists())],
    "api-upload-complete": [Write("POST", HOLDER, 404, prepare=lambda w: _upload(w, sent=True),
                                  done=lambda w, p, u: UploadSession.objects.get(pk=p["upload_id"]).state
                                  == UploadState.COMPLETED)],
    "api-upload-batch": [Write("POST", SUBMITTERS, 403, prepare=_path, data=lambda w, p: {"files": [
        {"path": p["path"], "size": 10, "sha256": hashlib.sha256(b"0123456789").hexdigest()}]},
        done=lambda w, p, u: UploadSession.objects.filter(path=p["path"]).exists())],
    "api-upload-batch-complete": [Write("POST", HOLDER, 404, prepare=_batch_upload,
                                        data=lambda w, p: {"ids": [p["upload_id"]]},
                                        done=lambda w, p, u: UploadSession.objects.get(pk=p["upload_id"]).state
                                        == UploadState.COMPLETED)],
    # The API's reads of a project, a job and a sweep; its cancels.
    "api-project-detail": READ_ONLY, "api-budget": READ_ONLY, "api-job-detail": READ_ONLY,
    "api-job-logs": READ_ONLY, "api-job-events": READ_ONLY, "api-job-output": READ_ONLY, "api-sweep-detail": READ_ONLY,
    "api-job-cancel": [Write("POST", MANAGERS, 403, done=lambda w, p, u: _job_state(w.job.pk) == JobState.CANCELLED)],
    "api-sweep-cancel": [Write("POST", MANAGERS, 403,
                               done=lambda w, p, u: not w.group.jobs.exclude(state=JobState.CANCELLED).exists())],
    # A token is its holder's alone: revoking someone else's is 404, site admins included (they use the admin).
    "api-token-revoke": [Write("POST", HOLDER, 404,
                               done=lambda w, p, u: ApiToken.objects.get(pk=w.token.pk).revoked_at is not None)],
    # OWN routes whose body names a project: submitting and uploading are for those who may submit; the
    # job list's bulk cancel is a cancel of each ticked job.
    "job-new": [Write("POST", SUBMITTERS, 200,
                      data=lambda w, p: {**_submit_body(w, "walk-page"), "project": w.project.pk, "hardware": w.hardware.pk,
                                         "nodes": 1, "launcher": "script"},
                      done=lambda w, p, u: Job.objects.filter(name="walk-page", user=u).exists())],
    "data": [Write("POST", SUBMITTERS, 400, disk=True, prepare=_path,
                   data=lambda w, p: {"project": "vision", "file": _file("walk.txt"), "path": p["path"]},
                   done=lambda w, p, u: StoredFile.objects.filter(path=p["path"]).exists())],
    "data-datasets": [Write("POST", SUBMITTERS, 400,  # the Data page's form: the page again, with the reason
                            data=lambda w, p: {"project": "vision", "name": "walked-page", "source": "file",
                                               "path": "vision-secret.txt"},
                            done=lambda w, p, u: Dataset.objects.filter(name="walked-page").exists())],
    "job-bulk-cancel": [Write("POST", MANAGERS, BACK_WITH_ERROR, data=lambda w, p: {"job": [w.job.pk]},
                              done=lambda w, p, u: _job_state(w.job.pk) == JobState.CANCELLED)],
    "api-jobs": [Write("POST", SUBMITTERS, 403, data=lambda w, p: _submit_body(w, "walk-api"),
                       done=lambda w, p, u: Job.objects.filter(name="walk-api", user=u).exists())],
    "api-jobs-batch": [Write("POST", SUBMITTERS, 403,
                             data=lambda w, p: {"jobs": [_submit_body(w, "walk-batch-0"), _submit_body(w, "walk-batch-1")]},
                             done=lambda w, p, u: Job.objects.filter(name__startswith="walk-batch-", user=u).exists())],
    "api-sweeps": [Write("POST", SUBMITTERS, 403, data=lambda w, p: {**_submit_body(w, "walk-sweep"), "sweep": {"X": [1, 2]}},
                         done=lambda w, p, u: JobGroup.objects.filter(name="walk-sweep").exists())],
    # Sessions: stopping one is its cancel (its owner, project admins and owners); reading one, like a job.
    "session-stop": [Write("POST", MANAGERS, BACK_WITH_ERROR,
                           done=lambda w, p, u: _job_state(w.session_job.pk) == JobState.CANCELLED)],
    "api-session-stop": [Write("POST", MANAGERS, 403,
                               done=lambda w, p, u: _job_state(w.session_job.pk) == JobState.CANCELLED)],
    "api-session-detail": READ_ONLY,
    # Starting a session records nothing here: the portal asks the hub, whose spawner records it with its server's
    # own hub token (no hub in this walk, so nobody's start goes anywhere).
    "session-new": READ_ONLY, "api-sessions": READ_ONLY, "session-list": READ_ONLY,
    "api-session-choices": READ_ONLY, "api-session-estimate": READ_ONLY, "hub-session-estimate": READ_ONLY,
    # OWN routes that only read, or only preview (nothing recorded).
    **dict.fromkeys(["dashboard", "project-list", "job-list", "job-preview", "job-presets", "job-notebook", "site-usage", "site-gpu-efficiency",
                     "cluster-accounts", "cluster-health", "notifications", "api-me", "api-projects", "api-clusters",
                     "api-hardware", "api-software", "api-presets", "api-places"], READ_ONLY),
    # OWN routes that change the caller's own things only.
    **dict.fromkeys(["cluster-account-link", "cluster-account-verify", "cluster-account-status", "api-tokens",
                     "notifications-read", "notification-preferences"], PERSONAL),
}


def test_every_project_and_own_route_has_a_write_rule():
    named = {name for route, name in routes() if kind_of(route, name) in ("project", "own")}
    assert not named - set(WRITES), f"say who may change what through these routes (WRITES): {sorted(named - set(WRITES))}"
    assert not set(WRITES) - named, f"WRITES names routes that no longer exist: {sorted(set(WRITES) - named)}"


def _route_of(name: str) -> str:
    return next(route for route, n in routes() if n == name)


def _url(name: str, world, **values) -> str:
    return url_of(_route_of(name), world, PROJECT.get(name, ()), **values)


@pytest.fixture
def walkers(world, make_user, settings):
    """Each role of vision as a user, and tokens of each role with each scope alone."""
    settings.KAKEHASHI_API_RATE = "100000/min"  # the walk is hundreds of calls a minute from each caller
    make_user("nina")  # someone to add
    world.viewer_membership = Membership.objects.get(project=world.project, user=world.viewer)
    world.allocation = Allocation.objects.get(project=world.project, cluster=world.cluster)
    Budget.objects.filter(project=world.project).update(amount=100000)  # the walk's submits must not run out
    users = {"viewer": world.viewer, "member": world.member, "admin": world.admin, "owner": world.alice,
             "staff": world.staff}
    tokens = {(role, scope): issue_token(user, name=f"walk-{scope}", scopes=[scope])[1]
              for role, user in users.items() for scope in ("read", "submit", "admin")}
    return users, tokens


def _send(client, method: str, url: str, data: dict, *, json_body: bool, headers: dict | None = None):
    headers = headers or {}
    if method == "DELETE":
        return client.delete(url, headers=headers)
    if method == "PATCH":
        return client.patch(url, json.dumps(data), content_type="application/json", headers=headers)
    if json_body:
        return client.post(url, json.dumps(data), content_type="application/json", headers=headers)
    return client.post(url, data, headers=headers)


def _error_messages(response) -> list[str]:
    return [str(m) for m in messages.get_messages(response.wsgi_request) if m.level == messages.ERROR]


@pytest.mark.parametrize("name", sorted(n for n, rule in WRITES.items() if isinstance(rule, list)))
def test_each_role_and_token_scope_changes_exactly_what_the_table_allows(client, world, walkers, name, request):
    users, tokens = walkers
    if any(write.disk for write in WRITES[name]):
        request.getfixturevalue("filesystem_storage")
    api = _route_of(name).startswith("api/")
    callers = [(role, None) for role in ROLES] + ([(role, scope) for role in ROLES for scope in ("read", "submit", "admin")]
                                                  if api else [])
    failures = []
    for write in WRITES[name]:
        for role, scope in callers:
            user = users[role]
            if scope is None:
                client.force_login(user)
                headers = {}
            else:
                client.logout()
                headers = {"Authorization": f"Bearer {tokens[role, scope]}"}
            scope_ok = scope is None or scope in (write.scope, "admin")
            allowed = role in write.may and scope_ok
            label = f"{write.method} {name} as {role}" + (f" with a token of scope {scope}" if scope else " (browser)")
            with transaction.atomic():  # each case starts from the same world: its savepoint is rolled back
                prepared = write.prepare(world)
                url = _url(name, world, **{k: v for k, v in prepared.items() if k in ("upload_id",)})
                before = fingerprint()
                response = _send(client, write.method, url, write.data(world, prepared),
                                 json_body=api and not write.form, headers=headers)
                happened = write.done(world, prepared, user)
                unchanged = fingerprint() == before
                transaction.set_rollback(True)
            code = response.status_code
            if allowed:
                if not (200 <= code < 400 and happened):
                    failures.append(f"{label}: may, but got {code} and {'it happened' if happened else 'nothing happened'}"
                                    f" {response.content[:300]!r}")
                continue
            expected = 403 if not scope_ok else write.refused
            if code != expected or happened or not unchanged:
                failures.append(f"{label}: expected a refusal {expected} changing nothing, got {code}"
                                f"{' and it happened' if happened else ''}{'' if unchanged else ' and something changed'}")
            elif not scope_ok and response.json().get("code") != "insufficient_scope":
                failures.append(f"{label}: 403 but not for the scope: {response.content[:200]!r}")
            elif code == BACK_WITH_ERROR and not _error_messages(response):
                failures.append(f"{label}: sent back without an error message")
    assert not failures, "\n".join(failures)


# Who may GET a PROJECT route, when not everyone who can see the project may (the others' answer); any other
# PROJECT route is read by every role, or answers 405 to every role when it only takes POST or DELETE.
GET_LIMITS = {"project-budget": (MANAGERS, 403), "project-idle-rule": (MANAGERS, 403), "api-upload": (HOLDER, 404), "api-upload-parts": (HOLDER, 404)}


def test_every_project_route_is_read_by_every_role_it_should_be_and_by_no_other(client, world):
    users = {"viewer": world.viewer, "member": world.member, "admin": world.admin, "owner": world.alice,
             "staff": world.staff}
    answers = {}
    before = fingerprint()
    for role, user in users.items():
        client.force_login(user)
        for name, url in project_routes(world):
            response = client.get(url)
            answers[name, role] = response.status_code
            if response.status_code == 302:  # downloads go to the object store, never to the sign-in
                assert "login" not in response["Location"], (role, url, response["Location"])
    assert fingerprint() == before
    failures = []
    for (name, role), code in answers.items():
        if all(answers[name, r] == 405 for r in users):
            continue  # POST-only: tried by every role in the write walk
        may, refused = GET_LIMITS.get(name, (frozenset(users), None))
        ok = code in (200, 302) if role in may else code == refused
        if not ok:
            failures.append(f"{role} GET {name}: {code}")
    assert not failures, failures
    assert sum(code in (200, 302) for code in answers.values()) >= 100


def test_routes_that_only_read_change_nothing_whoever_posts_or_deletes(client, world, walkers):
    """READ_ONLY routes, POSTed and DELETEd by every role (and alice's admin-scope token on the API): nothing
    changes, and no answer is a 5xx."""
    users, tokens = walkers
    before = fingerprint()
    for route, name in routes():
        if WRITES.get(name) != READ_ONLY:
            continue
        url = _url(name, world)
        callers = [(role, {}) for role in ROLES]
        if route.startswith("api/"):
            callers.append(("owner", {"Authorization": f"Bearer {tokens['owner', 'admin']}"}))
        for role, headers in callers:
            if headers:
                client.logout()
            else:
                client.force_login(users[role])
            for method in ("POST", "DELETE"):
                response = _call(client, method, url, headers)
                assert response.status_code < 500, (role, method, url, response.status_code)
    assert fingerprint() == before


# ------------------------------------------------------------- own routes given another project's or user's ids


NOTEBOOK = {"cells": [{"id": "params", "cell_type": "code", "metadata": {"tags": ["parameters"]}, "source": "secret_param = 1\n",
                       "outputs": [], "execution_count": None}],
            "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
            "nbformat": 4, "nbformat_minor": 5}


def test_own_routes_given_another_projects_ids_act_on_nothing_of_it_and_name_nothing_of_it(client, world):
    """Mallory fills the bodies of her own routes with vision's ids: its jobs in the bulk cancel, alice's
    notifications, vision as the project of a submit, an upload, a preview, a notebook of vision as hers, a dataset
    of vision in her own job. Nothing of vision changes, no answer names it, and her own project is untouched."""
    from django.core.files.base import ContentFile
    from django.core.files.storage import default_storage

    from portal.notifications.models import Kind as NotificationKind

    notebook = StoredFile.objects.create(
        project=world.project, path="analysis.ipynb", size=1, sha256="0" * 64, uploaded_by=world.alice,
        storage_name=default_storage.save("projects/vision/analysis.ipynb", ContentFile(json.dumps(NOTEBOOK).encode())))
    note = Notification.objects.create(user=world.alice, job=world.job, kind=NotificationKind.values[0],
                                       text="secret-job ended")
    _, secret = issue_token(world.mallory, name="mallory", scopes=["admin"])
    token = {"Authorization": f"Bearer {secret}"}
    client.force_login(world.mallory)
    before = fingerprint()
    job_form = {"project": world.project.pk, "name": "stolen", "hardware": world.hardware.pk, "nodes": 1,
                "walltime": "00:10:00", "launcher": "script", "script": "true"}
    pages = [
        ("/jobs/cancel/", {"job": [world.job.pk, world.members_job.pk] + list(world.group.jobs.values_list("pk", flat=True))}),
        ("/notifications/read/", {"id": [note.pk]}),
        ("/jobs/new/", job_form),
        ("/jobs/new/", {**job_form, "project": world.other.pk, "datasets": [world.dataset.pk]}),
        ("/jobs/preview/", job_form),
        ("/jobs/notebook/", {**job_form, "project": world.other.pk, "stored_notebook": notebook.pk}),
        ("/data/", {"project": "vision", "file": _file("stolen.txt"), "path": "stolen.txt"}),
    ]
    for url, data in pages:
        response = client.post(url, data, follow=True)
        body = response.content.decode(errors="replace")
        assert response.status_code in (200, 400), (url, response.status_code)
        leaked = [m for m in (*MARKERS, "secret echo", "echo secret") if m in body]
        assert not leaked, f"mallory POST {url} shows {leaked}"
    api = [
        ("/api/v1/jobs/", {"project": "vision", "name": "stolen", "hardware": "local-cpu", "script": "true"}),
        ("/api/v1/sweeps/", {"project": "vision", "name": "stolen", "hardware": "local-cpu", "script": "true",
                             "sweep": {"X": [1]}}),
        ("/api/v1/jobs/", {"project": "nlp", "name": "stolen", "hardware": "local-cpu", "script": "true",
                           "datasets": ["secret-data"]}),
    ]
    for url, data in api:
        response = client.post(url, json.dumps(data), content_type="application/json", headers=token)
        assert response.status_code in (400, 404), (url, response.status_code, response.content)
        assert not any(m in response.content.decode() for m in MARKERS if m != "secret-data"), url
    assert fingerprint() == before
    assert Notification.objects.get(pk=note.pk).read_at is None
    # The same notebook is alice's to use: the check above could have seen it.
    client.force_login(world.alice)
    response = client.post("/jobs/notebook/", {**job_form, "stored_notebook": notebook.pk})
    assert "secret_param" in response.content.decode()


def test_cloning_another_projects_job_prefills_nothing_of_it(client, world):
    client.force_login(world.mallory)
    for clone in (world.job.pk, world.members_job.pk):
        body = client.get(f"/jobs/new/?clone={clone}&project=vision").content.decode()
        assert not any(m in body for m in ("secret-job", "echo secret", "Vision lab")), clone
    client.force_login(world.member)  # who may see the job gets it prefilled: the check above could have seen it
    assert "echo secret" in client.get(f"/jobs/new/?clone={world.job.pk}").content.decode()
    client.force_login(world.viewer)  # a viewer is told they may not submit, with no form (issue 25)
    body = client.get(f"/jobs/new/?clone={world.job.pk}").content.decode()
    assert "You may not submit jobs: you are a viewer" in body and "echo secret" not in body


def test_nobody_reaches_another_persons_cluster_account(client, world):
    """alice's accounts on a cluster both projects use and on one only vision uses: mallory's verify and status
    are 404 for both (only her own account is ever looked up), linking the shared cluster makes an account of her
    own and leaves alice's as it was, and the cluster only vision uses is 404 to link."""
    from portal.clusters.actions import generate_key_pair
    from portal.clusters.models import Cluster

    accounts = {}
    for slug, projects in (("shared-hpc", (world.project, world.other)), ("vision-hpc", (world.project,))):
        cluster = Cluster.objects.create(slug=slug, name=slug, kind="slurm", login_host="127.0.0.1")
        for project in projects:
            Allocation.objects.create(project=project, cluster=cluster)
        private, public = generate_key_pair(f"alice@{slug}")
        account = ClusterAccount(cluster=cluster, user=world.alice, username="alice", public_key=public,
                                 last_error="secret-error")
        account.set_private_key(private)
        account.save()
        accounts[slug] = account
    client.force_login(world.mallory)
    before = fingerprint()
    for slug in accounts:
        assert client.post(f"/settings/clusters/{slug}/verify/").status_code == 404, slug
        response = client.get(f"/settings/clusters/{slug}/status/")
        assert response.status_code == 404 and "secret-error" not in response.content.decode(), slug
    assert client.post("/settings/clusters/vision-hpc/link/", {"vision-hpc-username": "alice"}).status_code == 404
    assert fingerprint() == before
    listing = client.get("/settings/clusters/").content.decode()
    assert "vision-hpc" not in listing and accounts["shared-hpc"].public_key not in listing
    response = client.post("/settings/clusters/shared-hpc/link/", {"shared-hpc-username": "alice"})
    assert response.status_code == 302
    mine = ClusterAccount.objects.get(cluster__slug="shared-hpc", user=world.mallory)
    for account in accounts.values():
        kept = ClusterAccount.objects.get(pk=account.pk)
        assert (kept.user_id, kept.username, kept.public_key, kept.last_error) == (
            world.alice.pk, "alice", account.public_key, "secret-error")
        assert kept.pk != mine.pk


# ------------------------------------------------------------------------------------------- sign-in routes


def _alices_sign_in(world) -> dict:
    """alice's sign-in things: a WebAuthn key, two e-mail addresses, an SSO identity."""
    from allauth.account.models import EmailAddress
    from allauth.mfa.models import Authenticator
    from allauth.socialaccount.models import SocialAccount

    key = Authenticator.objects.create(user=world.alice, type=Authenticator.Type.WEBAUTHN,
                                       data={"name": "alices-key", "credential": {}})
    EmailAddress.objects.create(user=world.alice, email="alice@example.org", primary=True, verified=True)
    spare = EmailAddress.objects.create(user=world.alice, email="alice.spare@example.org", verified=True)
    sso = SocialAccount.objects.create(user=world.alice, provider="openid_connect", uid="alice-at-the-idp")
    return {"key": key, "email": spare, "sso": sso}


def _sign_in_state(world) -> tuple:
    from allauth.account.models import EmailAddress
    from allauth.mfa.models import Authenticator
    from allauth.socialaccount.models import SocialAccount

    alice = type(world.alice).objects.get(pk=world.alice.pk)
    return (sorted((a.pk, a.type, json.dumps(a.data, sort_keys=True)) for a in Authenticator.objects.filter(user=alice)),
            sorted(EmailAddress.objects.filter(user=alice).values_list("pk", "email", "primary", "verified")),
            sorted(SocialAccount.objects.filter(user=alice).values_list("pk", "uid")),
            alice.password, alice.is_active, alice.email)


def _password_sign_in(client, username: str) -> None:
    """Through allauth's own forms, signed in and then re-authenticated, so that the routes changing sign-in
    factors get as far as looking the object up (else they only ask for the password again)."""
    client.logout()
    response = client.post("/accounts/login/", {"login": username, "password": "pw-for-tests-123"})
    assert response.status_code == 302 and "/accounts/" not in response["Location"], response
    assert client.post("/accounts/reauthenticate/", {"password": "pw-for-tests-123"}).status_code == 302


@pytest.fixture
def no_sign_in_rate_limits(settings):
    settings.ACCOUNT_RATE_LIMITS = False  # the walk signs in a hundred times a minute from one address


def test_mallory_cannot_remove_edit_or_see_alices_security_key(client, world, no_sign_in_rate_limits):
    """The WebAuthn key routes name a key by its id: another person's id is 404, whether removing or renaming,
    and alice's key stays as it was; alice herself removes it (so the refusals were not for some other reason)."""
    from allauth.mfa.models import Authenticator

    key = _alices_sign_in(world)["key"]
    _password_sign_in(client, "mallory")
    before = _sign_in_state(world)
    for action, data in (("remove", {}), ("edit", {"name": "mallorys-now"})):
        url = f"/accounts/2fa/webauthn/keys/{key.pk}/{action}/"
        for method in ("GET", "POST"):
            response = client.get(url) if method == "GET" else client.post(url, data)
            assert response.status_code == 404, (method, url, response.status_code, response.get("Location"))
    assert "alices-key" not in client.get("/accounts/2fa/webauthn/").content.decode()
    assert _sign_in_state(world) == before
    client.force_login(world.alice)  # her key is not a real one: the password re-authenticates her
    assert client.post("/accounts/reauthenticate/", {"password": "pw-for-tests-123"}).status_code == 302
    client.post(f"/accounts/2fa/webauthn/keys/{key.pk}/edit/", {"name": "renamed"})
    assert Authenticator.objects.get(pk=key.pk).data["name"] == "renamed"
    assert client.post(f"/accounts/2fa/webauthn/keys/{key.pk}/remove/").status_code == 302
    assert not Authenticator.objects.filter(pk=key.pk).exists()


def test_every_sign_in_route_holding_alices_ids_changes_nothing_of_hers(client, world, no_sign_in_rate_limits):
    """Every route under accounts/ (allauth, MFA, SSO, the hub's OAuth), GET and POST, by mallory freshly signed in,
    with alice's key id in the URL and alice's e-mail address and SSO identity in the body: alice's factors,
    addresses, identities, password and account are as before, nothing of hers is shown, and nothing is a 5xx."""
    from django.contrib.auth.tokens import default_token_generator
    from django.utils.http import int_to_base36

    alices = _alices_sign_in(world)
    before = _sign_in_state(world)
    values = {"pk": alices["key"].pk, "key": "not-a-key", "uidb36": int_to_base36(world.alice.pk),
              "organization_slug": "no-such-idp", "provider_id": "no-such-idp"}
    body = {"email": alices["email"].email, "action_remove": "", "action_primary": "", "account": alices["sso"].pk,
            "login": "alice", "password": "pw-for-tests-123", "oldpassword": "x", "password1": "Mallory-was-here-1",
            "password2": "Mallory-was-here-1", "name": "mallorys-now", "code": "123456"}
    walked = 0
    for route, name in routes():
        if kind_of(route, name) != "sign-in" or route.startswith("admin/"):
            continue
        url = "/" + re.sub(r"\(\?P<(\w+)>[^)]*\)|<(?:\w+:)?(\w+)>", lambda m: str(values[m.group(1) or m.group(2)]),
                           route).replace("^", "").replace("$", "")
        if "uidb36" in route:  # a reset link for alice, with a token no one was sent
            url = url.replace("not-a-key", default_token_generator.make_token(world.mallory))
        for method in ("GET", "POST"):
            _password_sign_in(client, "mallory")
            response = client.get(url) if method == "GET" else client.post(url, body)
            walked += 1
            assert response.status_code < 500, (method, url, response.status_code)
            shown = response.content.decode(errors="replace")
            assert not any(m in shown for m in ("alices-key", "alice.spare@example.org", "alice-at-the-idp")), (method, url)
            assert _sign_in_state(world) == before, f"mallory {method} {url} changed alice's sign-in"
    assert walked >= 90


# ------------------------------------------------------------------------------------------- admin routes


def _admin_urls(world, real: list | None = None) -> list[str]:
    """Every route of the Django admin as a URL naming a real object: the first row of the route's model (vision's
    project, alice's account, …), each app of the app-index pattern, and a page the catch-all answers. `real`
    collects the change and history pages of objects that exist."""
    from django.apps import apps
    from django.contrib.contenttypes.models import ContentType

    urls = []
    for route, _name in routes():
        if kind_of(route, _name) != "admin":
            continue
        if "(?P<app_label>" in route:
            labels = re.search(r"\(\?P<app_label>([^)]*)\)", route).group(1).split("|")
            urls += [f"/admin/{label}/" for label in labels]
            continue
        if "(?P<url>" in route:
            urls.append("/admin/no-such-page/")
            continue
        if route.startswith("admin/r/"):
            kind = ContentType.objects.get_for_model(type(world.project))
            urls.append(f"/admin/r/{kind.pk}/{world.project.pk}/")
            continue
        parts = route.split("/")
        pk = "1"
        if len(parts) > 3 and "<" in route:
            try:
                model = apps.get_model(parts[1], parts[2])
            except LookupError:
                model = None
            first = model.objects.order_by("pk").first() if model is not None else None
            pk = str(first.pk) if first is not None else "1"
            if first is not None and real is not None and route.endswith(("/change/", "/history/")):
                real.append("/" + re.sub(r"<[^>]+>", pk, route))
        urls.append("/" + re.sub(r"<[^>]+>", pk, route))
    return urls


def test_no_signed_in_non_staff_user_gets_any_admin_page(client, world, django_user_model):
    """Every admin route (changelists, add, change, delete, history, password, app indexes, view-on-site, the
    catch-all), GET and POST, by a project owner and by a member of another project: never a page, always the
    admin's sign-in or a refusal, and nothing changes. A superuser gets the same URLs' pages: they are real."""
    real = []
    urls = _admin_urls(world, real)
    assert len(urls) >= 200 and len(real) >= 20
    before = fingerprint(), sorted(django_user_model.objects.values_list("pk", "is_staff", "is_superuser", "password"))
    for user in (world.alice, world.mallory):
        client.force_login(user)
        for url in urls:
            for method in ("GET", "POST"):
                response = client.get(url) if method == "GET" else client.post(url, {"post": "yes", "is_staff": "on"})
                label = f"{user.username} {method} {url}"
                assert response.status_code in (302, 403, 404), f"{label}: {response.status_code}"
                if response.status_code == 302:
                    assert response["Location"].startswith("/admin/login/"), f"{label}: {response['Location']}"
    after = fingerprint(), sorted(django_user_model.objects.values_list("pk", "is_staff", "is_superuser", "password"))
    assert after == before
    root = django_user_model.objects.create_superuser("root", "root@example.org", "pw-for-tests-123")
    client.force_login(root)
    pages = [url for url in urls if not url.endswith(("/delete/", "/password/")) and "no-such-page" not in url
             and not url.startswith(("/admin/r/", "/admin/autocomplete/"))]
    answers = {url: client.get(url).status_code for url in pages}
    assert set(answers.values()) <= {200, 302, 403}, {u: c for u, c in answers.items() if c not in (200, 302, 403)}
    changelists = [url for url in pages if re.fullmatch(r"/admin/\w+/\w+/", url)]
    assert len(changelists) >= 30 and all(answers[url] == 200 for url in changelists + real), {
        url: answers[url] for url in changelists + real if answers[url] != 200}


# ------------------------------------------------------------------------------------ disabled accounts


def test_a_disabled_users_tokens_and_session_stop_working_at_once(client, world):
    """Disabled by a site admin, the account's tokens (every scope) and its signed-in browser are refused on
    their very next request, and nothing is recorded; enabled again, they work again."""
    from django.contrib.auth import get_user_model

    tokens = [issue_token(world.member, name=f"t{i}", scopes=s)[1] for i, s in enumerate((["read"], ["read", "submit"]))]
    client.force_login(world.member)
    for secret in tokens:
        assert client.get("/api/v1/me/", headers={"Authorization": f"Bearer {secret}"}).status_code == 200
    assert client.get("/jobs/").status_code == 200
    get_user_model().objects.filter(pk=world.member.pk).update(is_active=False)
    before = fingerprint()
    for secret in tokens:
        headers = {"Authorization": f"Bearer {secret}"}
        response = client.get("/api/v1/me/", headers=headers)
        assert response.status_code == 401 and response.json()["code"] == "account_disabled"
        response = client.post("/api/v1/jobs/", {"project": "vision", "name": "late", "hardware": "local-cpu",
                                                 "script": "true"}, content_type="application/json", headers=headers)
        assert response.status_code == 401
        assert client.post(f"/api/v1/jobs/{world.members_job.pk}/cancel/", headers=headers).status_code == 401
    response = client.get("/jobs/")
    assert response.status_code == 302 and "login" in response["Location"]  # the open session is over too
    assert fingerprint() == before
    get_user_model().objects.filter(pk=world.member.pk).update(is_active=True)
    assert client.get("/api/v1/me/", headers={"Authorization": f"Bearer {tokens[0]}"}).status_code == 200
