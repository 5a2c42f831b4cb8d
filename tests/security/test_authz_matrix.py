"""Authorization for every route of the URL configuration, against every kind of caller.

The routes are read from the URL configuration itself, so a route added tomorrow is walked the day it is added;
a route missing from ROUTES below fails the first test until someone says what it is. The victim is project
"vision" (its owner alice, a member, a viewer and an admin); the callers are anonymous, mallory (owner of
another project), each role of vision, a site admin, and API tokens with each scope, expired and revoked.
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils import timezone

from portal.api.models import ApiToken
from portal.api.tokens import issue_token
from portal.budgets.models import Budget, LedgerEntry
from portal.jobs import actions
from portal.jobs.models import Job, JobArtifact, JobGroup
from portal.projects.models import Membership, Role
from portal.storage import uploads
from portal.storage.models import Dataset, DatasetKind, StoredFile, UploadSession

pytestmark = pytest.mark.django_db

# What each route is. PUBLIC and SIGN_IN routes hold no project's data; OWN routes show the caller their own
# things (listings, forms, their settings); PROJECT routes name one object of one project; STAFF routes are for
# site admins. Prefixes cover the sign-in library (allauth, MFA, SAML, OIDC, the hub's OAuth) and Django's admin.
PUBLIC = {"healthz", "api-schema", "api-docs", "hub-service-entry", "hub-service-entry-path", "api-fallback"}
SIGN_IN_PREFIX, ADMIN_PREFIX = "accounts/", "admin/"
OWN = {
    "dashboard", "project-list", "job-list", "job-new", "job-preview", "job-presets", "site-usage", "data",
    "cluster-accounts", "cluster-account-link", "cluster-account-verify", "cluster-account-status", "api-tokens",
    "api-me", "api-projects", "api-clusters", "api-hardware", "api-software", "api-presets", "api-jobs", "api-sweeps",
    # Act only on what the caller may see: the ticked jobs they may cancel, their own notifications and settings,
    # the clusters of their projects, the places a project of theirs may run (?project= of another is 404).
    "job-bulk-cancel", "job-notebook", "cluster-health", "notifications", "notifications-read",
    "notification-preferences", "api-places",
}
STAFF = {"site-admin", "site-audit"}
# PROJECT routes: the URL arguments naming vision's object, and whether the route changes anything (POST).
PROJECT = {
    "project-detail": ("slug",), "project-members": ("slug",), "project-budget-bar": ("slug",),
    "project-budget": ("slug",), "project-usage": ("slug",), "job-detail": ("job",), "job-status": ("job",),
    "job-log": ("job", "stream"), "job-cancel": ("job",), "job-group": ("group",), "job-group-cancel": ("group",),
    "job-artifact": ("job", "artifact_id"), "data-download": ("file",), "api-token-revoke": ("token",),
    "api-project-detail": ("slug",), "api-budget": ("slug",), "api-files": ("slug",),
    "api-file-download": ("slug", "file"), "api-uploads": ("slug",), "api-upload": ("slug", "upload_id"),
    "api-upload-parts": ("slug", "upload_id"), "api-upload-complete": ("slug", "upload_id"),
    "api-job-detail": ("job",), "api-job-cancel": ("job",), "api-job-logs": ("job",),
    "api-job-output": ("job", "artifact_id"), "api-sweep-detail": ("group",), "api-sweep-cancel": ("group",),
    "project-clusters": ("slug",), "job-group-rerun": ("group",), "job-executed-notebook": ("job",),
    "api-datasets": ("slug",), "api-dataset": ("slug", "dataset"),
}
MARKERS = ("Vision lab", "secret-job", "secret-sweep", "vision-secret.txt", "vision-upload.bin", "alices-token",
           "secret-data")


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
        return actions.JobRequest(project=site.project, name=name, script="echo secret", hardware=site.hardware)

    site.job = actions.submit_job(site.alice, job_request(site.alice, "secret-job")).job
    site.members_job = actions.submit_job(site.member, job_request(site.member, "secret-job-2")).job
    site.group = actions.submit_sweep(site.alice, job_request(site.alice, "secret-sweep"), {"X": [1, 2]}).group
    name = default_storage.save(f"test-artifacts/{site.job.pk}/result.txt", ContentFile(b"secret output"))
    site.artifact = JobArtifact.objects.create(job=site.job, path="result.txt", size=13, stored_name=name)
    key = default_storage.save("projects/vision/vision-secret.txt", ContentFile(b"secret"))
    site.file = StoredFile.objects.create(project=site.project, path="vision-secret.txt", storage_name=key, size=6,
                                          sha256="0" * 64, uploaded_by=site.alice)
    site.upload, _ = uploads.create_upload(site.alice, site.project, path="vision-upload.bin", size=10)
    site.dataset = Dataset.objects.create(project=site.project, name="secret-data", kind=DatasetKind.FILE,
                                          stored_file=site.file, size=6, sha256="0" * 64, created_by=site.alice)
    site.token, _ = issue_token(site.alice, name="alices-token", scopes=["read", "submit"])
    return site


def url_of(route: str, world, args: tuple[str, ...]) -> str:
    values = {"slug": "vision", "job": world.job.pk, "stream": "stdout", "group": world.group.pk,
              "artifact_id": world.artifact.pk, "file": world.file.pk, "token": world.token.pk,
              "upload_id": world.upload.pk, "dataset": world.dataset.name}
    names = iter(args)

    def fill(match: re.Match) -> str:
        return str(values[next(names)])

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
    for template in ("/api/v1/jobs/{}/", "/api/v1/jobs/{}/logs/", "/api/v1/sweeps/{}/"):
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


READS = ["project-detail", "project-usage", "project-budget-bar", "job-detail", "job-status", "job-log", "job-group",
         "job-artifact", "data-download", "api-project-detail", "api-budget", "api-files", "api-file-download",
         "api-job-detail", "api-job-logs", "api-job-output", "api-sweep-detail", "api-datasets", "api-dataset"]


@pytest.mark.parametrize("who", ["viewer", "member", "admin", "alice", "staff"])
def test_everyone_who_may_see_the_project_reads_it(client, world, who):
    client.force_login(getattr(world, who))
    urls = dict(project_routes(world))
    for name in READS:
        response = client.get(urls[name])
        assert response.status_code in (200, 302), f"{who} GET {urls[name]}: {response.status_code}"
        if response.status_code == 302:  # downloads redirect to the object store, never to the sign-in
            assert "login" not in response["Location"]


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
    client.force_login(world.staff)
    assert client.get("/site/").status_code == 200


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
