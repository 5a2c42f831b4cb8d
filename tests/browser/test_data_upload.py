"""Uploading a file on the Data page shows its progress and lands in the project's storage."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import log_in

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_upload_shows_progress_and_the_file_appears(page, live_server, local_site, tmp_path, settings):
    from portal.storage.models import StoredFile

    settings.MEDIA_ROOT = str(tmp_path / "media")
    data = tmp_path / "weights.bin"
    data.write_bytes(b"\0" * (8 * 1024 * 1024))
    log_in(page, live_server.url, "alice")
    page.goto(live_server.url + "/data/")
    page.get_by_label("File", exact=True).set_input_files(str(data))
    page.get_by_label(re.compile("^Path in the project")).fill("models/weights.bin")
    # Watch what the page shows while the upload goes (our handler runs first: it was registered at load).
    page.evaluate("""window.__seen = [];
        document.addEventListener('htmx:xhr:progress', () => window.__seen.push([
            document.getElementById('upload-bar').value, document.getElementById('upload-status').textContent,
            document.getElementById('upload-progress').hidden]));""")
    page.get_by_role("button", name="Upload").click()
    expect(page.locator("#file-table")).to_contain_text("models/weights.bin", timeout=30_000)
    assert StoredFile.objects.get(path="models/weights.bin").size == 8 * 1024 * 1024
    seen = page.evaluate("window.__seen")
    assert seen and [100, "100 % of 8193 KiB sent", False] in seen
    assert all(not text or "of 8193 KiB" in text for _, text, _ in seen)  # the answer's download is not shown
