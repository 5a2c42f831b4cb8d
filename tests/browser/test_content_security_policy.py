"""Every page a researcher, a site admin and a visitor can reach runs under the Content-Security-Policy with no
violation: Chromium reports each blocked inline script, handler, style element or foreign source, and the walk
follows every link the pages offer."""

from __future__ import annotations

import re
from urllib.parse import urljoin, urlsplit

import pytest
from playwright.sync_api import Page

from tests.browser.conftest import log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# Links that change something or download a file are not pages to visit.
SKIP = re.compile(r"format=csv|/logout/|/download/|/outputs/\d+/|/log/(stdout|stderr)/|/api/(schema|v1)/|/static/|/media/"
                  r"|/delete/$|/history/$|/password/$|/accounts/oidc/|/accounts/saml/|/services/")
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
        page.context.add_init_script(WATCH_VIOLATIONS)
        page.on("console", self._console)

    def _console(self, message) -> None:
        text = message.text
        if message.type == "error" and ("Content Security Policy" in text or text.startswith("CSP violation")):
            self.violations.append(f"{message.page.url if hasattr(message, 'page') and message.page else ''}: {text}")


def walk(page: Page, base: str, start: list[str], watch: PolicyWatch, *, limit: int = 120) -> None:
    """Visit `start` and every same-site page linked from what is visited (breadth first, at most `limit`)."""
    queue, seen = list(start), set()
    while queue and len(seen) < limit:
        path = queue.pop(0)
        if _kind(path) in seen:
            continue
        seen.add(_kind(path))
        response = page.goto(base + path)
        assert response is not None and response.status < 500, (path, response and response.status)
        if page.locator("[hx-get], [hx-post], [hx-trigger]").count():  # htmx swaps content in: let it
            try:
                page.wait_for_load_state("networkidle", timeout=2_000)
            except Exception:  # noqa: BLE001 - a page that polls never goes idle; its first swaps are in by now
                pass
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
            if _kind(link) not in seen:
                queue.append(link)


def _kind(path: str) -> str:
    """Pages that differ only by an object's id show the same template: one of each is visited."""
    path = re.sub(r"/\d+/change/$", "/ID/change/", path)
    path = re.sub(r"^/jobs/\d+/$", "/jobs/ID/", path)
    return re.sub(r"([?&]clone=)\d+", r"\1ID", path)


@pytest.fixture
def site_with_everything(local_site, make_user):
    """Something on every page: a finished job with its logs, a sweep, a token, an identity provider."""
    from decimal import Decimal

    from portal.accounts.models import IdentityProvider, Protocol
    from portal.api.tokens import issue_token
    from portal.jobs.models import Job, JobGroup, JobOutput, JobState

    group = JobGroup.objects.create(project=local_site.project, user=local_site.alice, name="lr-sweep",
                                    sweep={"LR": ["0.1", "0.01"]})
    for n, state in enumerate((JobState.COMPLETED, JobState.RUNNING, JobState.FAILED)):
        job = Job.objects.create(
            project=local_site.project, user=local_site.alice, cluster=local_site.cluster, hardware=local_site.hardware,
            name=f"train-{n}", walltime_seconds=600, script="echo hello", state=state, scheduler_id=str(100 + n),
            estimate_amount=Decimal("1"), estimate_unit="points", cost_amount=Decimal("1"),
            group=group if n < 2 else None,
        )
        JobOutput.objects.create(job=job, stream="stdout", data=b"epoch 1 loss 0.5\n", complete=state != JobState.RUNNING)
    issue_token(local_site.alice, name="laptop", scopes=["read"])
    IdentityProvider.objects.create(protocol=Protocol.OIDC, slug="todai", name="University of Tokyo",
                                    server_url="https://idp.example.ac.jp/realms/u", client_id="kakehashi")
    root = make_user("root", staff=True)
    root.is_superuser = True
    root.save()
    local_site.group = group
    return local_site


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


def test_a_researcher_sees_no_policy_violation_on_any_page_they_can_reach(page, live_server, site_with_everything):
    watch = PolicyWatch(page)
    log_in(page, live_server.url, "alice")
    walk(page, live_server.url, [
        "/", "/jobs/new/", "/api/docs/", "/accounts/2fa/", "/accounts/2fa/webauthn/add/", "/accounts/password/change/",
        "/accounts/email/", "/accounts/3rdparty/", f"/jobs/groups/{site_with_everything.group.pk}/",
    ], watch)
    for expected in ("/jobs/", "/projects/vision/", "/data/", "/settings/tokens/", "/usage/"):
        assert expected in watch.visited, (expected, watch.visited)
    assert any(re.match(r"^/jobs/\d+/$", p) for p in watch.visited)
    assert any(p.startswith("/jobs/groups/") for p in watch.visited)
    assert watch.violations == [], watch.violations
    print(f"{len(watch.visited)} pages: {watch.visited}")


def test_a_site_admin_sees_no_policy_violation_in_the_portal_or_the_django_admin(page, live_server, site_with_everything):
    watch = PolicyWatch(page)
    log_in(page, live_server.url, "root")
    walk(page, live_server.url, ["/site/", "/site/audit/", "/usage/", "/admin/"], watch, limit=150)
    for expected in ("/site/audit/", "/admin/", "/admin/accounts/identityprovider/", "/admin/audit/auditentry/",
                     "/admin/auth/user/"):
        assert expected in watch.visited, (expected, watch.visited)
    assert any(re.match(r"^/admin/\w+/\w+/add/$", p) for p in watch.visited)
    assert watch.violations == [], watch.violations
    print(f"{len(watch.visited)} pages: {watch.visited}")
