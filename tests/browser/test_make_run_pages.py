"""The first hour on `make run` (issue 25), in Chromium against `make run` itself: the launcher's SQLite stack with its
demo data, the local backend and a job of each kind. Every page route answers without a server error, for the demo
researcher and for the site admin; the DEBUG pages are never shown; the templates train on this machine.

The crawl follows every link of every page (the Django admin's too, a few rows of each list), opens each route's
first page in the browser (its htmx parts included), and then asks every route of the URL configuration that no
link reached with the values of the demo's own objects: a route is walked whether or not a page links to it.
"""

from __future__ import annotations

import html
import json
import re
import time
from collections import defaultdict
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import nbformat
import pytest
import requests
from django.urls import URLPattern, URLResolver, get_resolver
from playwright.sync_api import Page, expect

from tests.browser.conftest import PageRequests, job_form_field, log_in
from tests.makerun import FINAL, Stack

pytestmark = [pytest.mark.browser, pytest.mark.timeout(900)]

DEMO = ("demo", "kakehashi-demo")
ADMIN = ("admin", "kakehashi-admin")
# Links a crawl must not follow: signing out ends the crawl's session; the admin's "view on site" leaves the portal.
SKIP = re.compile(r"logout|/admin/r/|^/static/|^/media/|^/api/v1/.*/download/")
VARIANTS_PER_ROUTE = 3  # distinct query strings per route (the admin's filters would otherwise be thousands)
ROWS_PER_ADMIN_LIST = 3  # change pages opened per admin list


@pytest.fixture(scope="module")
def demo_site(tmp_path_factory, make_run_database):
    """`make run` with the demo data and a job of each kind: a script that completed with outputs and metrics, one
    that failed, one cancelled, one still running, a sweep, a notebook job and a DDP template job. (Its database is
    migrated already; test_make_run_hybrid.py starts from nothing.)"""
    # The health check every 5 s, not 60: its row (a page of the admin's) is there before the crawl, however fast.
    stack = Stack(tmp_path_factory.mktemp("make-run"), make_run_database, KAKEHASHI_HEALTH_INTERVAL="5")
    try:
        stack.wait_ready()
        site = DemoSite(stack)
        site.seed()
        yield site
    finally:
        try:
            site.cancel_running()
        except Exception:  # noqa: BLE001 - the stack may already be gone; close() still kills what it started
            pass
        stack.close()


class DemoSite:
    def __init__(self, stack: Stack):
        self.stack = stack
        self.api = requests.Session()
        self.api.headers["Authorization"] = f"Bearer {stack.token()}"
        self.jobs: dict[str, int] = {}
        self.sweep = 0

    def submit(self, kind: str, **body) -> int:
        body = {"project": "demo", "name": kind, "hardware": "local-cpu", "walltime": "00:10:00", **body}
        response = self.api.post(f"{self.stack.base}/api/v1/jobs/", json=body, timeout=60)
        assert response.status_code == 201, (kind, response.status_code, response.text)
        self.jobs[kind] = response.json()["id"]
        return self.jobs[kind]

    def job(self, job_id: int) -> dict:
        return self.api.get(f"{self.stack.base}/api/v1/jobs/{job_id}/", timeout=30).json()

    def wait_ended(self, job_id: int, timeout: float = 300) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            job = self.job(job_id)
            if job["state"] in FINAL:
                return job
            time.sleep(1)
        raise AssertionError(f"job {job_id} did not end in {timeout} s: {self.job(job_id)}\n{self.stack.log()[-3000:]}")

    def seed(self) -> None:
        self.submit("completed", script='echo "hello from make run"\necho \'{"loss": 0.25}\' > outputs/metrics.json\n'
                                       'echo result > outputs/result.txt\n')
        self.submit("failed", script='echo "about to fail" >&2\nexit 3\n')
        self.submit("cancelled", script="sleep 600\n")
        self.submit("running", script="sleep 600\n")
        self.submit("notebook", notebook=_notebook(), parameters={"lr": 0.5})
        self.submit("ddp-template", template="ddp-mnist", env={"EPOCHS": "1"}, procs_per_node=2)
        response = self.api.post(f"{self.stack.base}/api/v1/sweeps/", timeout=60, json={
            "project": "demo", "name": "sweep", "hardware": "local-cpu", "walltime": "00:10:00",
            "script": 'echo "lr=$LR"\n', "sweep": {"LR": [0.1, 0.01]}})
        assert response.status_code == 201, response.text
        self.sweep = response.json()["id"]
        for point in response.json()["jobs"]:
            self.jobs[f"sweep-{point['id']}"] = point["id"]
        cancel = self.api.post(f"{self.stack.base}/api/v1/jobs/{self.jobs['cancelled']}/cancel/", timeout=30)
        assert cancel.status_code in (200, 202), cancel.text
        expected = {"failed": "failed", "cancelled": "cancelled"}
        for kind, job_id in self.jobs.items():
            if kind != "running":
                job = self.wait_ended(job_id)
                assert job["state"] == expected.get(kind, "completed"), (job, self.stack.log()[-3000:])
        # Its outputs are collected after it ends: the artifact's download is one of the routes.
        deadline = time.monotonic() + 60
        while not self.job(self.jobs["completed"]).get("outputs") and time.monotonic() < deadline:
            time.sleep(1)
        assert self.job(self.jobs["completed"]).get("outputs"), "the completed job's outputs were never collected"
        assert self.job(self.jobs["running"])["state"] in ("pending", "running", "submitting", "queued")
        # The local cluster's health, as the beat records it: the admin's list of health rows has one to open.
        deadline = time.monotonic() + 60
        while not self._health_recorded():
            assert time.monotonic() < deadline, f"no health recorded in 60 s:\n{self.stack.log()[-3000:]}"
            time.sleep(1)

    def _health_recorded(self) -> bool:
        clusters = self.api.get(f"{self.stack.base}/api/v1/clusters/", timeout=30).json()["results"]
        return any(cluster["health"] for cluster in clusters)

    def cancel_running(self) -> None:
        for kind in ("running",):
            self.api.post(f"{self.stack.base}/api/v1/jobs/{self.jobs[kind]}/cancel/", timeout=30)
            self.wait_ended(self.jobs[kind], timeout=60)


def _notebook() -> dict:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    params = nbformat.v4.new_code_cell("lr = 0.1")
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell("print(f'result={lr * 2}')")]
    return json.loads(nbformat.writes(nb))


# ------------------------------------------------------------------------------------------------------ the routes


def page_routes() -> dict[str, str]:
    """Every route of the URL configuration (name → route), but the API's (its own tests walk it, schemathesis
    included) and the admin's and sign-in library's, which are many and reached by following their links."""
    found: dict[str, str] = {}

    def walk(patterns, prefix: str) -> None:
        for entry in patterns:
            route = prefix + str(entry.pattern)
            if isinstance(entry, URLResolver):
                walk(entry.url_patterns, route)
            elif isinstance(entry, URLPattern) and entry.name:
                found.setdefault(entry.name, route)

    walk(get_resolver().url_patterns, "")
    return {name: route for name, route in found.items()
            if not route.startswith(("api/", "admin/", "accounts/", "^", "hub/"))}


def route_of(path: str) -> str | None:
    from django.urls import Resolver404, resolve

    try:
        match = resolve(path)
    except Resolver404:
        return None
    return match.route


def fill(route: str, site: DemoSite) -> str:
    """A route's URL with the demo's own objects in it: the project, the local cluster, a job with outputs."""
    values = {"slug": "demo", "pk": str(site.jobs["completed"]), "stream": "stdout", "artifact_id": "1",
              "upload_id": "00000000-0000-0000-0000-000000000000", "name": "none"}
    if route.startswith("jobs/groups/"):
        values["pk"] = str(site.sweep)
    if route.endswith("/notebook/"):
        values["pk"] = str(site.jobs["notebook"])
    if route.startswith(("settings/clusters/", "site/health-checks/")):
        values["slug"] = "local"
    path = re.sub(r"<(?:\w+:)?(\w+)>", lambda m: values.get(m.group(1), "1"), route)
    return "/" + path


class Crawl:
    """One person's crawl: every page reached by a link from the start pages, each route's first page opened in
    Chromium (with what htmx loads), the other variants fetched by the browser context's HTTP client."""

    def __init__(self, page: Page, base: str, site: DemoSite):
        self.page, self.base, self.site = page, base, site
        self.seen: set[str] = set()
        self.variants: dict[str, int] = defaultdict(int)
        self.opened_routes: set[str] = set()
        self.rows_opened: dict[str, int] = defaultdict(int)
        self.statuses: dict[str, int] = {}
        self.server_errors: list[str] = []
        self.requests = PageRequests(page)
        self.htmx_answers = 0
        page.on("response", self._on_response)

    def _on_response(self, response) -> None:
        if response.request.headers.get("hx-request"):
            self.htmx_answers += 1
        if response.url.startswith(self.base) and response.status >= 500:
            self.server_errors.append(f"{response.status} {response.request.method} {response.url[len(self.base):]}")

    def _admin_row(self, path: str) -> bool:
        """Whether this link is one more change page of an admin list than the crawl opens."""
        match = re.match(r"^/admin/(\w+)/(\w+)/\d+/change/$", path)
        if not match:
            return False
        key = "/".join(match.groups())
        self.rows_opened[key] += 1
        return self.rows_opened[key] > ROWS_PER_ADMIN_LIST

    def visit(self, path: str) -> list[str]:
        """Fetch one path; the same-origin links it holds."""
        route = route_of(urlsplit(path).path) or urlsplit(path).path
        self.variants[route] += 1
        if route not in self.opened_routes:
            self.opened_routes.add(route)
            self.requests.forget()
            try:
                response = self.page.goto(self.base + path, wait_until="load")
                status = response.status if response else 0
                self.requests.settle()
            except Exception:  # noqa: BLE001 - a download (CSV, an output file) is no page: its status below
                status = self.page.context.request.get(self.base + path, max_redirects=0).status
            if status == 200 and "text/html" in (self.page.evaluate("document.contentType") or ""):
                hrefs = self.page.eval_on_selector_all("a[href]", "els => els.map(e => e.getAttribute('href'))")
                self._status(path, status)
                return self._links(self.page.url, hrefs)
        response = self.page.context.request.get(self.base + path, max_redirects=0)
        self._status(path, response.status)
        if 300 <= response.status < 400:
            return self._links(self.base + path, [response.headers.get("location", "")])
        if response.status == 200 and "text/html" in response.headers.get("content-type", ""):
            return self._links(self.base + path, [html.unescape(h) for h in re.findall(r'href="([^"]+)"', response.text())])
        return []

    def _status(self, path: str, status: int) -> None:
        self.statuses[path] = status
        if status >= 500:
            self.server_errors.append(f"{status} GET {path}")

    def _links(self, at: str, hrefs: list[str]) -> list[str]:
        links = []
        for href in hrefs:
            if not href or href.startswith(("#", "mailto:", "javascript:")):
                continue
            url = urlsplit(urljoin(at, href))
            if f"{url.scheme}://{url.netloc}" != self.base:
                continue
            path = url.path + (f"?{url.query}" if url.query else "")
            links.append(path)
        return links

    def run(self, start: list[str]) -> None:
        queue = list(start)
        while queue:
            path = queue.pop(0)
            if path in self.seen or SKIP.search(path):
                continue
            self.seen.add(path)
            route = route_of(urlsplit(path).path) or urlsplit(path).path
            if self.variants[route] >= VARIANTS_PER_ROUTE or self._admin_row(path):
                continue
            queue.extend(self.visit(path))

    def walk_unreached(self, routes: dict[str, str]) -> list[str]:
        """GET every route no link reached, with the demo's values: a POST-only route answers 405, never 5xx."""
        reached = {route_of(urlsplit(p).path) for p in self.statuses}
        walked = []
        for route in routes.values():
            if route not in reached:
                path = fill(route, self.site)
                self.visit(path)
                walked.append(f"{self.statuses[path]} {path}")
        return walked


START = ["/", "/jobs/", "/jobs/new/", "/projects/", "/usage/", "/clusters/", "/data/", "/notifications/",
         "/settings/clusters/", "/settings/notifications/", "/site/", "/site/audit/", "/admin/", "/nope/"]


@pytest.mark.parametrize("who", [DEMO, ADMIN], ids=["demo-researcher", "site-admin"])
def test_every_page_route_answers_without_a_server_error_on_make_run_with_its_demo_data(demo_site, new_page, who):
    page = new_page()
    base = demo_site.stack.base
    log_in(page, base, who[0], who[1])
    crawl = Crawl(page, base, demo_site)
    started = time.monotonic()
    crawl.run([*START, f"/jobs/{demo_site.jobs['completed']}/", f"/jobs/groups/{demo_site.sweep}/",
               "/projects/demo/usage/?format=csv"])
    unreached = crawl.walk_unreached(page_routes())
    took = time.monotonic() - started
    assert not crawl.server_errors, f"server errors as {who[0]}: {crawl.server_errors}\n{demo_site.stack.log()[-4000:]}"
    statuses = defaultdict(int)
    for status in crawl.statuses.values():
        statuses[status] += 1
    routes = page_routes()
    reached = {route_of(urlsplit(p).path) for p in crawl.statuses}
    assert set(routes.values()) <= reached, set(routes.values()) - reached
    # The pages a researcher is shown in the navigation are really pages, with the demo's data in them.
    for path in ("/usage/", "/projects/demo/usage/", f"/jobs/{demo_site.jobs['completed']}/", "/jobs/"):
        assert crawl.statuses.get(path) == 200, (path, crawl.statuses.get(path))
    print(f"{who[0]}: {len(crawl.statuses)} URLs ({len(crawl.opened_routes)} routes opened in Chromium, "
          f"{crawl.htmx_answers} htmx answers) in "
          f"{took:.0f} s; statuses {dict(statuses)}; routes no link reached: {unreached}")


def test_make_run_shows_its_own_not_found_page_never_djangos_debug_page(demo_site, page):
    base = demo_site.stack.base
    log_in(page, base, *ADMIN)
    response = page.goto(base + "/no-such-page/")
    assert response.status == 404
    expect(page.get_by_role("heading", level=1)).to_have_text("Not found")
    body = page.content()
    for debug in ("URLconf", "DEBUG = True", "Using the URLconf", "SECRET_KEY", "settings file"):
        assert debug not in body
    usage = page.goto(base + "/usage/")
    assert usage.status == 200
    expect(page.get_by_role("heading", level=1)).to_contain_text("Usage")


def test_the_ddp_template_trains_on_make_run_s_own_machine_from_the_form(demo_site, page, shots):
    """The template the demo researcher picks runs here: torchrun from the .venv (`make torch`), two processes."""
    base = demo_site.stack.base
    log_in(page, base, *DEMO, next_path="/jobs/new/?template=ddp-mnist")
    choose_hardware(page, "local-cpu")
    expect(job_form_field(page, "Software")).to_have_value(re.compile(r"\d+"))  # Python 3 (system), which has torch
    expect(page.locator("[data-template-limit]")).to_have_count(0)
    job_form_field(page, "Processes per node").fill("2")
    job_form_field(page, "Walltime").fill("00:10:00")
    job_form_field(page, "Name").fill("ddp-from-the-form")
    expect(page.locator("#script-preview")).to_contain_text("torchrun")
    page.get_by_role("button", name="Run", exact=True).click()
    expect(page).to_have_url(re.compile(r"/jobs/\d+/$"))
    job_id = int(re.search(r"/jobs/(\d+)/$", page.url).group(1))
    job = demo_site.wait_ended(job_id)
    assert job["state"] == "completed", (job, demo_site.stack.log()[-3000:])
    expect(page.locator("#job-state [data-state]")).to_have_attribute("data-state", "completed", timeout=30_000)
    page.get_by_role("tab", name="stdout").click()
    expect(page.locator("#stdout-pane pre.log")).to_contain_text("world size 2", timeout=30_000)
    # The log's header names the job as the page does (its directory), not the runner's process id.
    scheduler_id = job["scheduler_id"]
    expect(page.locator("#stdout-pane pre.log")).to_contain_text(f"(scheduler id {scheduler_id})")
    expect(page.locator("body")).to_contain_text(scheduler_id)
    shots(page, "ddp-completed-on-make-run")


def test_a_template_is_refused_before_it_runs_where_the_machine_has_no_torch(demo_site, page, shots):
    """The site points the local cluster's jobs at a Python without torch (Debian's own): the form says why the
    templates cannot run there, Run is refused with the same words, and nothing is recorded or charged."""
    stack = demo_site.stack
    _set_local_python(stack, "/usr/bin/python3")
    try:
        before = _money_and_jobs(demo_site)
        log_in(page, stack.base, *DEMO, next_path="/jobs/new/?template=gpu-health")
        expect(page.locator("[data-template-limit]")).to_contain_text(
            "The templates cannot run on This machine: it has no torchrun or torch (`make torch` installs PyTorch")
        choose_hardware(page, "local-cpu")
        expect(page.locator("#preview")).to_contain_text("template gpu-health needs torchrun and torch, which This "
                                                         "machine does not have (its jobs run with /usr/bin/python3)")
        page.get_by_role("button", name="Run", exact=True).click()
        expect(page.locator("#form-errors")).to_contain_text("make torch")
        shots(page, "refused-without-torch")
        response = demo_site.api.post(f"{stack.base}/api/v1/jobs/", timeout=30, json={
            "project": "demo", "name": "no-torch", "hardware": "local-cpu", "template": "ddp-mnist"})
        assert response.status_code == 400 and "torch" in response.text, response.text
        assert _money_and_jobs(demo_site) == before
    finally:
        _set_local_python(stack, "")


def choose_hardware(page: Page, slug: str) -> None:
    value = page.locator(f'#id_hardware option[data-slug="{slug}"]').get_attribute("value")
    job_form_field(page, "Hardware").select_option(value)


def _money_and_jobs(site: DemoSite) -> tuple:
    budget = site.api.get(f"{site.stack.base}/api/v1/projects/demo/budget/", timeout=30).json()
    jobs = site.api.get(f"{site.stack.base}/api/v1/jobs/?limit=100", timeout=30).json()
    return budget["reserved"], budget["spent"], sorted(job["id"] for job in jobs["results"])


def _set_local_python(stack: Stack, python: str) -> None:
    import subprocess
    import sys

    code = ("from portal.clusters.models import Cluster; c = Cluster.objects.get(slug='local'); "
            f"c.options = {{**c.options, 'python': {python!r}}} if {python!r} else "
            "{k: v for k, v in c.options.items() if k != 'python'}; c.save()")
    subprocess.run([sys.executable, "manage.py", "shell", "-c", code], cwd=Path(__file__).resolve().parents[2],
                   env=stack.env, check=True, capture_output=True)


def _manage(stack: Stack, code: str) -> str:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "manage.py", "shell", "-c", code], cwd=Path(__file__).resolve().parents[2],
                          env=stack.env, check=True, capture_output=True, text=True)
    # Its last line: Django's shell first says how many models it imported.
    lines = done.stdout.strip().splitlines()
    return lines[-1] if lines else ""


def test_the_preview_follows_an_advanced_edit_and_clone_and_edit_carries_it(demo_site, page, shots):
    base = demo_site.stack.base
    log_in(page, base, *DEMO, next_path="/jobs/new/")
    choose_hardware(page, "local-cpu")
    job_form_field(page, "Name").fill("edited-once")
    job_form_field(page, "Walltime").fill("00:05:00")
    job_form_field(page, "Script").fill('echo "payload ran"')
    expect(page.locator("#script-preview")).to_contain_text('bash "$KAKEHASHI_JOB_DIR/payload.sh"')
    page.locator("#advanced summary").click()
    page.get_by_role("button", name="Copy the preview here").click()
    editor = page.get_by_label("Edited job script")
    editor.fill(editor.input_value().replace('echo "== start $(date -Is) =="', 'echo "== start, as edited =="'))
    # Typing is enough: the preview shows the edit, and says it is the edit that will be submitted.
    expect(page.locator("#script-preview")).to_contain_text("== start, as edited ==")
    expect(page.locator("#preview-edited")).to_have_text("with your edit")
    shots(page, "preview-with-the-edit")
    page.get_by_role("button", name="Run", exact=True).click()
    expect(page).to_have_url(re.compile(r"/jobs/\d+/$"))
    first = int(re.search(r"/jobs/(\d+)/$", page.url).group(1))
    assert demo_site.wait_ended(first)["state"] == "completed"

    page.get_by_role("link", name="Clone & edit").click()
    expect(page.locator("[data-notice=clone]")).to_contain_text("the clone carries the edit")
    expect(page.get_by_label("Edited job script")).to_have_value(re.compile("== start, as edited =="))
    expect(page.locator("#preview-edited")).to_have_text("with your edit")
    shots(page, "clone-carries-the-edit")
    page.get_by_role("button", name="Run", exact=True).click()
    expect(page).to_have_url(re.compile(r"/jobs/\d+/$"))
    clone = int(re.search(r"/jobs/(\d+)/$", page.url).group(1))
    assert clone != first and demo_site.wait_ended(clone)["state"] == "completed"
    page.get_by_role("tab", name="stdout").click()
    expect(page.locator("#stdout-pane pre.log")).to_contain_text("== start, as edited ==", timeout=30_000)
    expect(page.locator("#stdout-pane pre.log")).to_contain_text("payload ran")


def test_a_sweeps_estimate_prices_every_point_and_what_the_budget_keeps_after_all_of_them(demo_site, page):
    base = demo_site.stack.base
    log_in(page, base, *DEMO, next_path="/jobs/new/")
    choose_hardware(page, "local-cpu")
    job_form_field(page, "Name").fill("grid")
    job_form_field(page, "Walltime").fill("01:00:00")
    job_form_field(page, "Script").fill('echo "$LR $EPOCHS"')
    job_form_field(page, "Parameter sweep").fill("LR=0.1,0.01,0.001\nEPOCHS=1,2,3,4")
    expect(page.locator("#sweep-note")).to_contain_text("A sweep of 12 jobs")
    expect(page.locator("#estimate-formula")).to_have_text("(12 jobs × 1 node × 1.00 points/node-h × walltime)")
    expect(page.locator("#estimate-amount")).to_have_text("12.00 points")
    expect(page.locator("#budget-after")).to_contain_text("left after this sweep's 12 jobs")


def test_a_viewer_is_told_they_may_not_submit_rather_than_given_a_form_that_can_only_fail(demo_site, new_page):
    stack = demo_site.stack
    _manage(stack, "from django.contrib.auth import get_user_model; "
                   "get_user_model().objects.create_user('vera', password='vera-password-123')")
    owner = new_page()
    log_in(owner, stack.base, *DEMO, next_path="/projects/demo/members/")
    owner.get_by_label("User name or email").fill("vera")
    owner.get_by_label("Role", exact=True).select_option("viewer")
    owner.get_by_role("button", name="Add").click()
    expect(owner.locator("body")).to_contain_text("vera is now viewer of demo")

    viewer = new_page()
    log_in(viewer, stack.base, "vera", "vera-password-123")
    viewer.get_by_role("navigation", name="Main navigation").get_by_role("link", name="New job").click()
    expect(viewer.locator("#may-not-submit")).to_contain_text("You may not submit jobs: you are a viewer in Demo project")
    expect(viewer.locator("#job-form")).to_have_count(0)
    viewer.goto(stack.base + "/jobs/")
    expect(viewer.locator("#jobs-total")).to_contain_text("jobs")  # she sees the project's jobs all the same


def test_the_job_list_says_how_many_filters_my_jobs_and_pages_by_the_size_chosen(demo_site, page):
    base = demo_site.stack.base
    total = demo_site.api.get(f"{base}/api/v1/jobs/?limit=1", timeout=30).json()["count"]
    log_in(page, base, *ADMIN, next_path="/jobs/")
    expect(page.locator("#jobs-total")).to_have_text(f"{total} jobs")
    page.get_by_label("Per page").select_option("25")
    expect(page).to_have_url(re.compile(r"size=25"))
    expect(page.locator("#job-list tbody tr[data-job]")).to_have_count(min(total, 25))
    page.get_by_label("Only my jobs").check()
    expect(page).to_have_url(re.compile(r"mine=1"))
    expect(page.locator("#jobs-total")).to_have_text("0 jobs, yours")  # the site admin submitted none
    page.context.clear_cookies()
    log_in(page, base, *DEMO, next_path="/jobs/?mine=1&size=25")
    expect(page.locator("#jobs-total")).to_have_text(f"{total} jobs, yours")


def test_the_site_page_sets_up_the_local_health_check_in_the_operations_project_and_fits_its_window(
        demo_site, new_page, shots):
    stack = demo_site.stack
    spent_before = _money_and_jobs(demo_site)[:2]
    page = new_page()
    log_in(page, stack.base, *ADMIN)
    page.goto(stack.base + "/site/")
    for width in (1280, 768, 390):
        page.set_viewport_size({"width": width, "height": 900})
        assert page.evaluate("document.documentElement.scrollWidth <= document.documentElement.clientWidth"), width
    page.set_viewport_size({"width": 1280, "height": 900})
    row = page.get_by_role("row").filter(has_text="local-cpu")
    expect(row).to_contain_text("2 CPUs")
    expect(row).not_to_contain_text("2 CPUs, 2 CPUs")
    expect(row).to_contain_text("set up This machine first")
    local = page.locator("[data-health-cluster=local]")
    local.get_by_role("button", name=re.compile("Set up health checks")).click()
    expect(local).to_contain_text("ready in Site operations")
    row.get_by_role("link", name=re.compile("Run health check")).click()
    expect(job_form_field(page, "Project")).to_have_value(re.compile(r"\d+"))
    assert "Site operations" in job_form_field(page, "Project").locator("option:checked").inner_text()
    job_form_field(page, "Processes per node").fill("2")
    job_form_field(page, "Walltime").fill("00:10:00")
    shots(page, "health-check-form")
    page.get_by_role("button", name="Run", exact=True).click()
    expect(page).to_have_url(re.compile(r"/jobs/\d+/$"))
    job_id = int(re.search(r"/jobs/(\d+)/$", page.url).group(1))
    assert _manage(stack, f"from portal.jobs.models import Job; print(Job.objects.get(pk={job_id}).project.slug)"
                   ).strip() == "site-ops"
    deadline = time.monotonic() + 300
    while _manage(stack, f"from portal.jobs.models import Job; print(Job.objects.get(pk={job_id}).state)").strip() \
            not in FINAL:
        assert time.monotonic() < deadline, stack.log()[-3000:]
        time.sleep(2)
    page.goto(stack.base + "/site/")
    expect(page.get_by_role("row").filter(has_text="local-cpu")).to_contain_text("TFLOP/s/device", timeout=30_000)
    shots(page, "measured")
    assert _money_and_jobs(demo_site)[:2] == spent_before  # the demo project was not charged


def test_lowering_a_strict_budget_names_the_jobs_it_cancels_and_saves_only_once_confirmed(demo_site, page, shots):
    """Last: it cancels the demo's running job. The audit log then finds the budget's rows by the area's name."""
    stack = demo_site.stack
    running = demo_site.jobs["running"]
    assert demo_site.job(running)["state"] not in FINAL
    log_in(page, stack.base, *DEMO, next_path="/projects/demo/budget/")
    page.get_by_label("Amount").fill("0.01")
    page.get_by_role("button", name="Save budget").click()
    warning = page.locator("#budget-lowering")
    expect(warning).to_contain_text("Saving a strict budget of 0.01 points cancels 1 job(s) at once: running.")
    shots(page, "asks-first")
    assert demo_site.job(running)["state"] not in FINAL
    page.get_by_label("Save it and let the budget cancel these jobs").check()
    page.get_by_role("button", name="Save budget").click()
    expect(page).to_have_url(re.compile(r"/projects/demo/$"))
    job = demo_site.wait_ended(running, timeout=120)
    assert job["state"] == "cancelled" and "strict budget" in (job.get("cancel_reason") or ""), job
    page.goto(stack.base + "/projects/demo/budget/")
    page.get_by_label("Amount").fill("1000")
    page.get_by_role("button", name="Save budget").click()
    expect(page).to_have_url(re.compile(r"/projects/demo/$"))

    page.context.clear_cookies()
    log_in(page, stack.base, *ADMIN)
    page.goto(stack.base + "/site/audit/")
    page.get_by_label("Action").fill("budget")
    page.get_by_role("button", name=re.compile("Filter|Show")).first.click()
    expect(page.locator("table")).to_contain_text("budget.set")


def test_kakehashi_status_piped_into_a_reader_that_stops_early_ends_quietly(demo_site):
    """`kakehashi status N | head`: the reader closes the pipe; the CLI says nothing more (no BrokenPipeError
    traceback) and exits as a command a pipe's reader closed on does (141). `true` reads nothing at all, so the
    pipe is closed before the CLI writes, every time."""
    import subprocess
    import sys

    stack = demo_site.stack
    env = {**stack.env, "KAKEHASHI_URL": stack.base, "KAKEHASHI_TOKEN": demo_site.api.headers["Authorization"][7:]}
    cli = Path(sys.executable).parent / "kakehashi"  # the venv's, as `pip install ./cli` puts it
    job = demo_site.jobs["completed"]
    done = subprocess.run(["bash", "-c", f'"{cli}" status {job} | true; echo "status=${{PIPESTATUS[0]}}" >&2'],
                          env=env, capture_output=True, text=True, timeout=60)
    assert "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr, done.stderr
    assert done.stderr.strip() == "status=141", done.stderr
    shown = subprocess.run(["bash", "-c", f'"{cli}" status {job} | head -n 1'], env=env, capture_output=True,
                           text=True, timeout=60)
    assert shown.stdout.strip() and not shown.stderr, shown.stderr
