"""Every page a researcher, a site admin and a visitor can reach runs under the Content-Security-Policy with no
violation: Chromium reports each blocked inline script, handler, style element or foreign source. The walk starts
from every route of the URL configuration (as tests/security/test_authz_matrix.py classifies them and names their
objects), so a route added tomorrow is visited the day it is added, and follows every link the pages offer."""

from __future__ import annotations

import re
from urllib.parse import urljoin, urlsplit

import pytest
from playwright.sync_api import Page

from tests.browser.conftest import PageRequests, log_in
from tests.security import test_authz_matrix as matrix

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# Links that change something or download a file are not pages to visit.
SKIP = re.compile(r"format=csv|/logout/|/download/|/outputs/\d+/|/log/(stdout|stderr)/|/api/(schema|v1)/|/static/|/media/"
                  r"|/delete/$|/history/$|/password/$|/accounts/oidc/|/accounts/saml/")
# In the Django admin: each app, each model's list, add form and change forms; not its filters and sort orders.
ADMIN_PAGE = re.compile(r"^/admin/(\w+/(\w+/((add|[^/]+/change)/)?)?)?$")
WATCH_VIOLATIONS = """
document.addEventListener('securitypolicyviolation', (e) => {
  console.error(`CSP violation: ${e.violatedDirective} blocked ${e.blockedURI || 'inline'} at ${e.sourceFile}:${e.lineNumber}`);
});
"""


class PolicyWatch:
    def __init__(self, page: Page):
        self.violations: list[str] = []
        self.visited: list[str] = []
        self.requests = PageRequests(page)
        page.context.add_init_script(WATCH_VIOLATIONS)
        page.on("console", self._console)

    def _console(self, message) -> None:
        text = message.text
        if message.type == "error" and ("Content Security Policy" in text or text.startswith("CSP violation")):
            self.violations.append(f"{message.page.url if hasattr(message, 'page') and message.page else ''}: {text}")


def walk(page: Page, base: str, start: list[str], watch: PolicyWatch, *, limit: int = 400) -> None:
    """Visit every path of `start`, then every same-site page linked from what is visited (breadth first; of the
    linked pages, one per template). `limit` only stops a walk that runs away: reaching it fails the test."""
    queue, seen, kinds = list(dict.fromkeys(start)), set(), set()
    seeds = set(queue)
    while queue:
        path = queue.pop(0)
        if path in seen or (path not in seeds and _kind(path) in kinds):
            continue
        assert len(seen) < limit, f"the walk passed {limit} pages: {watch.visited[-20:]}"
        seen.add(path)
        kinds.add(_kind(path))
        watch.requests.forget()
        if not _open(page, base + path, seed=path in seeds):
            watch.visited.append(path)  # no page to run a policy on
            continue
        if page.locator("[hx-get], [hx-post], [hx-trigger]").count():  # htmx swaps content in: let it
            watch.requests.settle(timeout=2.0)  # a page that polls: its first swaps are in by then
        watch.visited.append(path)
        for href in page.eval_on_selector_all("a[href]", "els => els.map(e => e.getAttribute('href'))"):
            target = urlsplit(urljoin(base + path, href))
            if f"{target.scheme}://{target.netloc}" != base or SKIP.search(f"{target.path}?{target.query}"):
                continue
            if target.path.startswith("/admin/"):
                if target.query or not ADMIN_PAGE.match(target.path):
                    continue
                link = target.path
            else:
                link = target.path + (f"?{target.query}" if target.query else "")
            if link not in seen and _kind(link) not in kinds:
                queue.append(link)


def _open(page: Page, url: str, *, seed: bool) -> bool:
    """Go to `url`: True for a page. A route of the URL configuration is asked first (with the page's cookies):
    a download, a JSON answer or an empty refusal (a route that only takes POST answers GET with an empty 405,
    which Chromium would replace with its own error page) is no page to run a policy on, and answers is enough."""
    if seed:
        answer = page.request.get(url, max_redirects=0)
        assert answer.status < 500, (url, answer.status)
        kind, elsewhere = answer.headers.get("content-type", ""), urljoin(url, answer.headers.get("location", "/"))
        if answer.status == 405 or "attachment" in answer.headers.get("content-disposition", "") or (
                answer.status < 300 and not kind.startswith("text/html")) or urlsplit(elsewhere)[:2] != urlsplit(url)[:2]:
            return False  # (the last: a download sent to the object store)
    response = page.goto(url)
    assert response is not None and response.status < 500, (url, response and response.status)
    return True


def _kind(path: str) -> str:
    """Pages that differ only by an object's id show the same template: one of each linked kind is visited."""
    path = re.sub(r"/\d+/change/$", "/ID/change/", path)
    path = re.sub(r"^/jobs/\d+/$", "/jobs/ID/", path)
    return re.sub(r"([?&]clone=)\d+", r"\1ID", path)


EXECUTED = {  # what papermill leaves: a parameters cell, the injected one, text, a table and a plot
    "cells": [
        {"id": "p", "cell_type": "code", "metadata": {"tags": ["parameters"]}, "source": "lr = 0.1\n", "outputs": [],
         "execution_count": 1},
        {"id": "i", "cell_type": "code", "metadata": {"tags": ["injected-parameters"]}, "source": "lr = 0.01\n",
         "outputs": [], "execution_count": 2},
        {"id": "m", "cell_type": "markdown", "metadata": {}, "source": "## Loss by epoch"},
        {"id": "t", "cell_type": "code", "metadata": {}, "source": "print(lr); df", "execution_count": 3, "outputs": [
            {"output_type": "stream", "name": "stdout", "text": "0.01\n"},
            {"output_type": "execute_result", "execution_count": 3, "metadata": {}, "data": {
                "text/plain": "   epoch  loss\n0      1   0.5",
                "text/html": "<div><style scoped>.dataframe td { text-align: right; }</style><table class=\"dataframe\">"
                             "<tr><th>epoch</th><th>loss</th></tr><tr><td>1</td><td>0.5</td></tr></table></div>"}},
            {"output_type": "display_data", "metadata": {}, "data": {
                "text/plain": "<Figure>", "image/png": "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk"
                                                       "+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="}}]},
    ],
    "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
                 "papermill": {"parameters": {"lr": 0.01}}},
    "nbformat": 4, "nbformat_minor": 5,
}


@pytest.fixture
def site_with_everything(local_site, make_user):
    """Something on every page and an object behind every route that names one: finished, running and failed jobs
    with their logs, an executed notebook job with its outputs, a sweep, a file, a dataset, an upload under way, a
    token, a cluster account of alice's own, an identity provider."""
    import json
    from decimal import Decimal

    from django.core.files.base import ContentFile
    from django.core.files.storage import default_storage

    from portal.accounts.models import IdentityProvider, Protocol
    from portal.api.tokens import issue_token
    from portal.clusters.actions import link_account
    from portal.clusters.models import Allocation, Cluster
    from portal.jobs import notebooks
    from portal.jobs.models import Job, JobArtifact, JobGroup, JobOutput, JobState
    from portal.storage import uploads
    from portal.storage.models import Dataset, DatasetKind, StoredFile

    site = local_site
    group = JobGroup.objects.create(project=site.project, user=site.alice, name="lr-sweep",
                                    sweep={"LR": ["0.1", "0.01"]})
    site.jobs = []
    for n, state in enumerate((JobState.COMPLETED, JobState.RUNNING, JobState.FAILED)):
        job = Job.objects.create(
            project=site.project, user=site.alice, cluster=site.cluster, hardware=site.hardware,
            name=f"train-{n}", walltime_seconds=600, script="echo hello", state=state, scheduler_id=str(100 + n),
            estimate_amount=Decimal("1"), estimate_unit="points", cost_amount=Decimal("1"),
            group=group if n < 2 else None,
        )
        JobOutput.objects.create(job=job, stream="stdout", data=b"epoch 1 loss 0.5\n", complete=state != JobState.RUNNING)
        site.jobs.append(job)
    notebook = Job.objects.create(
        project=site.project, user=site.alice, cluster=site.cluster, hardware=site.hardware, name="train-notebook",
        kind=Job.Kind.NOTEBOOK, walltime_seconds=600, script="", notebook={**EXECUTED, "cells": EXECUTED["cells"][:1]},
        parameters={"lr": 0.01}, state=JobState.COMPLETED, scheduler_id="200", estimate_amount=Decimal("1"),
        estimate_unit="points", cost_amount=Decimal("1"))
    JobOutput.objects.create(job=notebook, stream="stderr", data=b"Executing: 100%|##########| 4/4\n", complete=True)
    executed = json.dumps(EXECUTED).encode()
    stored = default_storage.save(f"test-artifacts/{notebook.pk}/notebook.ipynb", ContentFile(executed))
    JobArtifact.objects.create(job=notebook, path=notebooks.EXECUTED_NOTEBOOK, size=len(executed), stored_name=stored)
    stored = default_storage.save(f"test-artifacts/{notebook.pk}/loss.csv", ContentFile(b"epoch,loss\n1,0.5\n"))
    site.artifact = JobArtifact.objects.create(job=notebook, path="loss.csv", size=17, stored_name=stored)
    site.job = notebook  # the job every route naming one shows: the notebook's, with its executed notebook
    site.jobs.append(notebook)
    key = default_storage.save("projects/vision/results.txt", ContentFile(b"result"))
    site.file = StoredFile.objects.create(project=site.project, path="results.txt", storage_name=key, size=6,
                                          sha256="0" * 64, uploaded_by=site.alice)
    site.dataset = Dataset.objects.create(project=site.project, name="results", kind=DatasetKind.FILE,
                                          stored_file=site.file, size=6, sha256="0" * 64, created_by=site.alice)
    site.upload, _ = uploads.create_upload(site.alice, site.project, path="big.bin", size=10)
    site.token, _ = issue_token(site.alice, name="laptop", scopes=["read"])
    hpc = Cluster.objects.create(slug="hpc", name="HPC", kind="slurm", login_host="127.0.0.1")
    Allocation.objects.create(project=site.project, cluster=hpc)
    link_account(hpc, username="alice", user=site.alice, actor=site.alice)
    IdentityProvider.objects.create(protocol=Protocol.OIDC, slug="todai", name="University of Tokyo",
                                    server_url="https://idp.example.ac.jp/realms/u", client_id="kakehashi")
    root = make_user("root", staff=True)
    root.is_superuser = True
    root.save()
    site.group = group
    # A session of the project (a job of kind session), for the routes that name one.
    from portal.sessions.actions import default_app
    from portal.sessions.models import Session

    site.session_job = Job.objects.create(project=site.project, user=site.alice, name="lab", kind=Job.Kind.SESSION,
                                          cluster=notebook.cluster, hardware=notebook.hardware, script="",
                                          walltime_seconds=600)
    Session.objects.create(job=site.session_job, app=default_app(), hub_user="alice", server_name="lab",
                           token_digest="0" * 64)
    return site


def route_pages(site, kinds: tuple[str, ...]) -> dict[str, str]:
    """Every route of these kinds (tests/security/test_authz_matrix.py's classification) as a URL naming the site's
    objects, by route name. Routes that only take POST or DELETE are visited too: their refusal is a page."""
    pages = {}
    for route, name in matrix.routes():
        if matrix.kind_of(route, name) not in kinds:
            continue
        if name in matrix.PROJECT:
            pages[name] = matrix.url_of(route, site, matrix.PROJECT[name])
        else:  # an own route naming something: alice's cluster account
            pages[name] = "/" + re.sub(r"<[^>]+>", "hpc", route)
    return pages


def test_a_visitor_sees_no_policy_violation_on_the_sign_in_pages(page, live_server, site_with_everything):
    watch = PolicyWatch(page)
    walk(page, live_server.url, ["/accounts/login/", "/accounts/signup/", "/accounts/password/reset/"], watch)
    assert "/accounts/login/" in watch.visited and len(watch.visited) >= 3
    assert page.goto(live_server.url + "/accounts/login/").headers["content-security-policy"]
    assert watch.violations == []
    # The watch does see a violation: an inline handler slipped into the page is blocked and reported.
    page.evaluate("""document.body.insertAdjacentHTML('beforeend', '<img src="/static/kakehashi.css?x" onerror="window.x = 1">')""")
    page.wait_for_timeout(500)
    assert any("script-src-attr" in v or "script-src" in v for v in watch.violations), watch.violations
    assert page.evaluate("window.x") is None


def _routes_visited(pages: dict[str, str], watch: PolicyWatch) -> set[str]:
    return {name for name, url in pages.items() if url in watch.visited}


def test_a_researcher_sees_no_policy_violation_on_any_page_they_can_reach(page, live_server, site_with_everything):
    """Every route of a project and of one's own (each naming alice's objects: her notebook job with its executed
    notebook, her sweep, file, dataset, upload, token and cluster account), every job, and every page linked from
    them."""
    site = site_with_everything
    watch = PolicyWatch(page)
    log_in(page, live_server.url, "alice")
    pages = route_pages(site, ("project", "own"))
    walk(page, live_server.url, [
        "/", *pages.values(), *(f"/jobs/{job.pk}/" for job in site.jobs), f"/jobs/groups/{site.group.pk}/",
        "/api/docs/", "/accounts/2fa/", "/accounts/2fa/webauthn/add/", "/accounts/password/change/",
        "/accounts/email/", "/accounts/3rdparty/",
        "/services/kakehashi/", "/services/kakehashi/jobs/",  # the hub's way in (no hub here: the portal's 404)
    ], watch)
    assert _routes_visited(pages, watch) == set(pages), set(pages) - _routes_visited(pages, watch)
    for expected in ("/jobs/", "/projects/vision/", "/data/", "/settings/tokens/", "/usage/", "/clusters/",
                     f"/jobs/{site.job.pk}/", f"/jobs/{site.job.pk}/notebook/"):
        assert expected in watch.visited, (expected, watch.visited)
    page.goto(f"{live_server.url}/jobs/{site.job.pk}/")  # the executed notebook shows in its sandboxed frame
    frame = page.frame_locator("#notebook-frame")
    assert frame.locator("table.dataframe").count() == 1 and frame.locator("img").count() == 1
    assert watch.violations == [], watch.violations
    print(f"{len(watch.visited)} pages: {watch.visited}")


@pytest.mark.long
def test_a_site_admin_sees_no_policy_violation_in_the_portal_or_the_django_admin(page, live_server, site_with_everything):
    watch = PolicyWatch(page)
    log_in(page, live_server.url, "root")
    pages = route_pages(site_with_everything, ("staff",))
    walk(page, live_server.url, [*pages.values(), "/usage/", "/clusters/", "/admin/"], watch)
    assert _routes_visited(pages, watch) == set(pages)
    for expected in ("/site/audit/", "/admin/", "/admin/accounts/identityprovider/", "/admin/audit/auditentry/",
                     "/admin/auth/user/"):
        assert expected in watch.visited, (expected, watch.visited)
    assert any(re.match(r"^/admin/\w+/\w+/add/$", p) for p in watch.visited)
    assert watch.violations == [], watch.violations
    print(f"{len(watch.visited)} pages: {watch.visited}")
