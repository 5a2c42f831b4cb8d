"""Browser tests: headless Debian Chromium, driven by Playwright's sync API, against pytest-django's live_server.

`make test` installs Chromium (tests/system-deps.sh chromium) and the `playwright` package; `playwright install`
is never used (it downloads its own browser build, which this environment cannot do). Screenshots of every
step go to test-artifacts/screenshots/<test>/<NN-step>.png.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

# Playwright's sync API keeps an asyncio loop in this thread; Django then refuses ORM calls from the test body
# ("SynchronousOnlyOperation") although they are ordinary synchronous calls. The portal itself runs in
# live_server's own threads and is not affected.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

from playwright.sync_api import Browser, BrowserContext, Page, expect, sync_playwright  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "test-artifacts" / "screenshots"
PASSWORD = "pw-for-tests-123"  # tests/conftest.py make_user's default
# Chromium's headless shell (Debian's chromium-headless-shell, what Playwright itself runs for headless=True): the same
# Blink without the browser's own interface, so 7 processes a page instead of 15 and about 40 % less CPU for the same
# walk (docs/decisions/0064). The full browser still works where only it is installed. /usr/lib/chromium/… are the
# binaries behind Debian's wrapper scripts in /usr/bin and start faster.
CHROMIUM_CANDIDATES = [os.environ.get("KAKEHASHI_CHROMIUM", ""), "/usr/lib/chromium/chromium-headless-shell",
                       "/usr/lib/chromium/chromium", "/usr/bin/chromium"]
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
]

expect.set_options(timeout=10_000)


def chromium_path() -> str:
    for candidate in CHROMIUM_CANDIDATES:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    # Not a skip: `make test` installs Chromium, so a missing browser is a broken setup, not an optional extra.
    raise RuntimeError("Chromium is not installed: run `make system-deps` (tests/system-deps.sh chromium-headless-shell)")


def launch_browser() -> Iterator[Browser]:
    """The suite's one headless Chromium; the `browser` fixture (tests/conftest.py) yields it to every test."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path(), headless=True, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


class PageRequests:
    """The requests a page has in flight, to wait until what a page loads after its own load (htmx's `load`
    triggers, swaps) has arrived: `settle()` returns after a short quiet. Playwright's "networkidle" waits 0.5 s of
    quiet on every page, which was most of a crawl's time; a part that polls every few seconds is caught by
    neither."""

    def __init__(self, page: Page):
        self.page = page
        self.in_flight: set = set()
        page.on("request", self._started)  # (Playwright takes Python functions, not a set's own methods)
        page.on("requestfinished", self._ended)
        page.on("requestfailed", self._ended)

    def _started(self, request) -> None:
        self.in_flight.add(request)

    def _ended(self, request) -> None:
        self.in_flight.discard(request)

    def forget(self) -> None:
        """What the previous page left unanswered is not the next page's."""
        self.in_flight.clear()

    def settle(self, quiet: float = 0.15, timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        quiet_since = None
        while time.monotonic() < deadline:
            if self.in_flight:
                quiet_since = None
            elif quiet_since is None:
                quiet_since = time.monotonic()
            elif time.monotonic() - quiet_since >= quiet:
                return
            self.page.wait_for_timeout(25)  # lets Playwright deliver the page's request events


@pytest.fixture
def new_page(browser):
    """new_page() -> a Page in a fresh context (its own cookies: one per person logged in). Uncaught JavaScript
    errors on any page fail the test."""
    contexts: list[BrowserContext] = []
    errors: list[str] = []

    def make() -> Page:
        context = browser.new_context(viewport={"width": 1280, "height": 900}, locale="en-GB",
                                      timezone_id="Asia/Tokyo", reduced_motion="reduce")
        context.set_default_timeout(15_000)
        contexts.append(context)
        page = context.new_page()
        page.on("pageerror", lambda exc: errors.append(f"{page.url}: {exc}"))
        return page

    yield make
    for context in contexts:
        context.close()
    assert not errors, f"JavaScript errors in the page: {errors}"


@pytest.fixture
def page(new_page) -> Page:
    return new_page()


class Screenshots:
    """shots(page, "step") saves test-artifacts/screenshots/<test>/<NN-step>.png and returns its path."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.count = 0
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)

    def __call__(self, page: Page, step: str, *, full_page: bool = True) -> Path:
        self.count += 1
        path = self.folder / f"{self.count:02d}-{step}.png"
        if full_page:  # from the top, so sticky parts (the job form's preview) sit where a reader expects them
            page.evaluate("window.scrollTo(0, 0)")
        page.screenshot(path=str(path), full_page=full_page, animations="disabled")
        return path


@pytest.fixture
def shots(request) -> Screenshots:
    return Screenshots(SCREENSHOTS / re.sub(r"[^A-Za-z0-9_.-]+", "-", request.node.name).strip("-"))


def log_in(page: Page, base_url: str, username: str, password: str = PASSWORD, *, next_path: str = "/") -> None:
    """Through allauth's login page, as a person does: the login_required redirect, then type and press Sign In."""
    page.goto(base_url + next_path)
    expect(page).to_have_url(re.compile(r"/accounts/login/"))
    page.get_by_label(re.compile(r"^(Login|Username)", re.I)).fill(username)
    page.get_by_label(re.compile(r"^Password")).fill(password)
    page.get_by_role("button", name="Sign In", exact=True).click()  # not "Sign in with a passkey"
    expect(page).not_to_have_url(re.compile(r"/accounts/login/"))
    expect(page.get_by_role("navigation", name="Main navigation")).to_contain_text(username)


def open_new_job_form(page: Page) -> None:
    """From any page: the navigation's New job button."""
    page.get_by_role("navigation", name="Main navigation").get_by_role("link", name="New job").click()
    expect(page).to_have_url(re.compile(r"/jobs/new/"))
    expect(page.get_by_role("heading", name="New job", level=1)).to_be_visible()


def job_form_field(page: Page, label: str):
    return page.locator("#job-form").get_by_label(label, exact=True)


def watch_job_states(page: Page) -> None:
    """Record, in the page, every state the badge shows (htmx swaps the status card in place)."""
    page.evaluate("""() => {
        window.kkStates = [];
        window.kkSamePage = true;  // gone if the page is reloaded or left
        const record = () => {
            const badge = document.querySelector('#job-state [data-state]');
            if (badge && window.kkStates[window.kkStates.length - 1] !== badge.dataset.state) {
                window.kkStates.push(badge.dataset.state);
            }
        };
        record();
        new MutationObserver(record).observe(document.getElementById('job-status'), {subtree: true, childList: true});
    }""")


def seen_job_states(page: Page) -> list[str]:
    assert page.evaluate("window.kkSamePage === true"), "the job page was reloaded or left"
    return page.evaluate("window.kkStates")
