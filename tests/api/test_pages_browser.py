"""The API tokens and Data pages in a real browser, as a person uses them, checked by axe-core."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request

import pytest
from playwright.sync_api import expect

from tests.browser.a11y import assert_no_violations
from tests.browser.conftest import Screenshots

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def alice_session(local_site, live_server) -> dict:
    """A session cookie for alice (the login form itself is tested elsewhere). Made before Playwright starts:
    database work done inside its event loop opens a connection that outlives the test."""
    from django.conf import settings
    from django.test import Client

    client = Client()
    client.force_login(local_site.alice)
    return {"name": settings.SESSION_COOKIE_NAME, "value": client.cookies[settings.SESSION_COOKIE_NAME].value,
            "url": live_server.url}


@pytest.fixture
def page(alice_session, browser):
    """A page in its own context on the suite's one browser (two Playwright instances in one process clash)."""
    context = browser.new_context(viewport={"width": 1280, "height": 900}, accept_downloads=True)
    context.add_cookies([alice_session])
    context.set_default_timeout(15_000)
    errors: list[str] = []
    page = context.new_page()
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    yield page
    context.close()
    assert not errors, errors


@pytest.fixture
def shots(request):
    from tests.browser.conftest import SCREENSHOTS

    return Screenshots(SCREENSHOTS / re.sub(r"[^A-Za-z0-9_.-]+", "-", request.node.name).strip("-"))


def _me(base: str, token: str) -> int:
    request = urllib.request.Request(base + "/api/v1/me/", headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - the live test server
            json.loads(response.read())
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_a_token_is_created_shown_once_used_and_revoked(live_server, local_site, page, shots):
    base = live_server.url
    page.goto(base + "/")
    page.get_by_role("link", name="Settings").click()
    page.get_by_role("link", name="API tokens").click()
    expect(page.get_by_role("heading", name="API tokens", exact=True)).to_be_visible()
    assert_no_violations(page, "the API tokens page")
    page.get_by_label("Name").fill("laptop")
    page.get_by_label(re.compile(r"^submit")).check()
    page.get_by_role("button", name="Create token").click()
    secret = page.get_by_label("New token").input_value()
    assert secret.startswith("kh_")
    shots(page, "token-created")
    assert_no_violations(page, "the page showing a new token")
    assert _me(base, secret) == 200

    page.goto(base + "/settings/tokens/")
    table = page.locator("#token-table")
    expect(table).to_contain_text("laptop")
    expect(table).to_contain_text("read, submit")
    assert secret not in page.content()
    page.get_by_role("button", name="Revoke token laptop").click()
    expect(page.locator("#token-table")).to_contain_text("revoked")
    shots(page, "token-revoked")
    assert _me(base, secret) == 401


@pytest.fixture
def media(filesystem_storage):
    """The Data page of a site without an object store (`make run`); tests/browser/test_data_upload.py has the
    direct uploads."""


def test_a_file_is_uploaded_listed_and_downloaded_on_the_data_page(media, live_server, local_site, page, shots, tmp_path):
    data = tmp_path / "train.csv"
    data.write_text("a,b\n1,2\n")
    base = live_server.url
    page.goto(base + "/")
    page.get_by_role("link", name="Data").click()
    expect(page.get_by_role("heading", name="Data", exact=True)).to_be_visible()
    assert_no_violations(page, "the empty Data page")
    page.get_by_label("File", exact=True).set_input_files(str(data))
    page.get_by_label(re.compile(r"^Path in the project")).fill("datasets/")
    page.get_by_role("button", name="Upload").click()
    expect(page.get_by_role("alert")).to_contain_text("Uploaded datasets/train.csv")
    expect(page.locator("#file-table")).to_contain_text("datasets/train.csv")
    shots(page, "uploaded")
    assert_no_violations(page, "the Data page with a file")
    with page.expect_download() as download:
        page.get_by_role("link", name="datasets/train.csv").click()
    assert download.value.suggested_filename == "train.csv"
    assert open(download.value.path(), encoding="utf-8").read() == "a,b\n1,2\n"

    page.get_by_label(re.compile(r"^Path in the project")).fill("../escape.csv")
    page.get_by_label("File", exact=True).set_input_files(str(data))
    page.get_by_role("button", name="Upload").click()
    expect(page.locator(".invalid-feedback")).to_contain_text("'..'")
    shots(page, "bad-path")
