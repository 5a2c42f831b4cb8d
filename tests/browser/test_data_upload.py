"""Uploading on the Data page: files and folders go from Chromium straight to the object store (SeaweedFS), with a
progress bar, and a reloaded page resumes where the upload stopped. On a site without an object store the page
uploads through the portal, as before."""

from __future__ import annotations

import hashlib
import os
import re

import pytest
from playwright.sync_api import expect

from tests.browser.a11y import assert_no_violations
from tests.browser.conftest import log_in

pytestmark = pytest.mark.django_db(transaction=True)
MiB = 1024 * 1024


@pytest.fixture
def small_parts(settings):
    settings.KAKEHASHI_UPLOAD_PART_BYTES = 5 * MiB
    settings.KAKEHASHI_BROWSER_UPLOAD_PART_BYTES = 5 * MiB


def _row(page, path: str):
    return page.locator("#file-table tr", has=page.get_by_role("link", name=path, exact=True))


def _part_puts(page) -> list[str]:
    seen: list[str] = []
    page.on("request", lambda request: seen.append(request.url)
            if request.method == "PUT" and "partNumber=" in request.url else None)
    return seen


def test_files_and_a_folder_upload_straight_to_the_store_with_progress_and_are_listed(
        page, live_server, local_site, tmp_path, small_parts, object_store, settings, shots, live_worker):
    from portal.storage.models import StoredFile

    weights = tmp_path / "weights.bin"
    weights.write_bytes(os.urandom(23 * MiB))
    folder = tmp_path / "cifar"
    (folder / "train").mkdir(parents=True)
    (folder / "train" / "batch_1.bin").write_bytes(os.urandom(MiB))
    (folder / "labels.txt").write_text("cat\ndog\n")

    log_in(page, live_server.url, "alice")
    page.goto(live_server.url + "/data/")
    expect(page.get_by_role("heading", name="Upload files")).to_be_visible()
    puts = _part_puts(page)
    page.get_by_label("Files", exact=True).set_input_files(str(weights))
    page.get_by_label("Or a folder").set_input_files(str(folder))
    page.get_by_label(re.compile("^Into the folder")).fill("datasets/")
    page.evaluate("""() => { window.kkBar = [];
        new MutationObserver(() => window.kkBar.push(document.getElementById('upload-status').textContent))
          .observe(document.getElementById('upload-status'), {childList: true, characterData: true, subtree: true}); }""")
    page.get_by_role("button", name="Upload").click()
    expect(page.locator("#upload-status")).to_contain_text("Uploaded 3 file(s)", timeout=60_000)
    assert page.locator("#upload-bar").evaluate("bar => bar.value") == 100
    seen = page.evaluate("window.kkBar")
    assert any(re.match(r"\d+ % of 24\.0 MiB · [\d.]+ \w?i?B/s(, .+ left)?( · whole-file SHA-256 \d+ %)?$", text)
               for text in seen), seen
    # Before the first byte, the page says it is hashing, never "0 % · 0 B/s".
    assert seen[0].startswith("Hashing the first parts before sending them"), seen
    assert not any(text.startswith("0 % of") and "0 B/s" in text for text in seen), seen

    expected = {
        "datasets/weights.bin": weights.read_bytes(),
        "datasets/cifar/train/batch_1.bin": (folder / "train" / "batch_1.bin").read_bytes(),
        "datasets/cifar/labels.txt": b"cat\ndog\n",
    }
    # The file of five parts is listed as verifying until a worker has hashed it whole in the store; the list
    # refreshes itself and shows it as a download once it is ready.
    expect(page.locator("#upload-list")).to_contain_text("uploaded; its SHA-256 is being verified")
    for path, content in expected.items():
        row = _row(page, path)
        expect(row).to_contain_text(hashlib.sha256(content).hexdigest()[:12], timeout=60_000)
        stored = StoredFile.objects.get(path=path)
        assert stored.size == len(content) and stored.sha256 == hashlib.sha256(content).hexdigest()
    expect(_row(page, "datasets/weights.bin")).to_contain_text("23.0 MiB")
    assert len(puts) == 5 + 1 + 1  # weights in five 5 MiB parts, one part each for the small files
    shots(page, "uploaded")
    assert_no_violations(page, "the Data page after an upload")

    # The file downloads from the store itself.
    with page.expect_download() as download:
        page.get_by_role("link", name="datasets/cifar/labels.txt", exact=True).click()
    assert open(download.value.path(), "rb").read() == b"cat\ndog\n"


def test_a_page_reloaded_mid_upload_resumes_from_the_parts_already_in_the_store(
        page, live_server, local_site, tmp_path, small_parts, object_store, shots, live_worker):
    from portal.storage.models import StoredFile, UploadSession

    data = os.urandom(28 * MiB)  # six parts
    local = tmp_path / "checkpoint.pt"
    local.write_bytes(data)
    log_in(page, live_server.url, "alice")
    page.goto(live_server.url + "/data/")

    # The network to the store stalls after the first two parts: later parts never get an answer.
    stalled = []

    def stall_late_parts(route):
        number = int(re.search(r"partNumber=(\d+)", route.request.url).group(1))
        if number <= 2:
            route.continue_()
        else:
            stalled.append(number)

    page.route(re.compile(r".*partNumber=\d+.*"), stall_late_parts)
    done = []
    page.on("requestfinished", lambda r: done.append(r.url) if r.method == "PUT" and "partNumber=" in r.url else None)
    page.get_by_label("Files", exact=True).set_input_files(str(local))
    page.get_by_role("button", name="Upload").click()
    expect(page.locator("#upload-list")).to_contain_text("uploading")
    page.wait_for_function("() => document.getElementById('upload-bar').value > 0", timeout=30_000)
    for _ in range(150):
        if len(done) >= 2 and stalled:
            break
        page.wait_for_timeout(100)
    assert len(done) == 2 and stalled, (done, stalled)
    shots(page, "stalled")

    page.reload()  # the stalled parts are dropped with the page
    page.unroute_all(behavior="ignoreErrors")
    assert not StoredFile.objects.exists()
    puts = _part_puts(page)
    page.get_by_label("Files", exact=True).set_input_files(str(local))
    page.get_by_role("button", name="Upload").click()
    expect(page.locator("#upload-list")).to_contain_text("resuming: 2 of 6 parts (10.0 MiB) kept from the earlier attempt")
    expect(page.locator("#upload-status")).to_contain_text("Uploaded 1 file(s)", timeout=60_000)
    assert page.locator("#upload-bar").evaluate("bar => bar.value") == 100
    sent = sorted(int(re.search(r"partNumber=(\d+)", url).group(1)) for url in puts)
    assert sent == [3, 4, 5, 6]  # parts 1 and 2 were in the store already
    assert UploadSession.objects.count() == 1
    stored = StoredFile.objects.get()
    assert stored.size == len(data) and stored.sha256 == hashlib.sha256(data).hexdigest()
    expect(_row(page, "checkpoint.pt")).to_contain_text(stored.sha256[:12], timeout=60_000)
    shots(page, "resumed")


def test_with_the_pages_own_part_size_an_interrupted_upload_keeps_most_of_what_it_sent_and_says_so_truthfully(
        page, live_server, local_site, tmp_path, object_store, live_worker):
    """The site's default parts (64 MiB, the CLI's) would have kept nothing of a 40 MiB file: the page asks for its
    own small parts (8 MiB). An attempt that got no part into the store is not called "resuming"."""
    from portal.storage.models import StoredFile

    data = os.urandom(40 * MiB)
    local = tmp_path / "features.npy"
    local.write_bytes(data)
    log_in(page, live_server.url, "alice")
    page.goto(live_server.url + "/data/")
    expect(page.locator("#files-help")).to_contain_text("in parts of 8.0 MiB")

    # First attempt: the store never answers a part. Reloaded, nothing was kept, and the page says so.
    page.route(re.compile(r".*partNumber=\d+.*"), lambda route: None)
    page.get_by_label("Files", exact=True).set_input_files(str(local))
    page.get_by_role("button", name="Upload").click()
    expect(page.locator("#upload-status")).to_contain_text("Hashing the first parts before sending them")
    page.wait_for_timeout(1500)
    page.reload()
    page.unroute_all(behavior="ignoreErrors")

    # Second attempt: parts 1-3 arrive, the rest stall.
    stalled = []

    def stall_late_parts(route):
        if int(re.search(r"partNumber=(\d+)", route.request.url).group(1)) <= 3:
            route.continue_()
        else:
            stalled.append(route)

    page.route(re.compile(r".*partNumber=\d+.*"), stall_late_parts)
    done = []
    page.on("requestfinished", lambda r: done.append(r.url) if r.method == "PUT" and "partNumber=" in r.url else None)
    page.get_by_label("Files", exact=True).set_input_files(str(local))
    page.get_by_role("button", name="Upload").click()
    expect(page.locator("#upload-list")).to_contain_text("starting again: no part of the earlier attempt reached the store")
    expect(page.locator("#upload-list")).not_to_contain_text("resuming")
    page.wait_for_function("() => document.getElementById('upload-bar').value > 0", timeout=30_000)
    for _ in range(200):
        if len(done) >= 3 and stalled:
            break
        page.wait_for_timeout(100)
    assert len(done) == 3 and stalled, (done, stalled)
    page.reload()
    page.unroute_all(behavior="ignoreErrors")

    # Third: 24 of 40 MiB were kept; only the last two parts travel again.
    puts = _part_puts(page)
    page.get_by_label("Files", exact=True).set_input_files(str(local))
    page.get_by_role("button", name="Upload").click()
    expect(page.locator("#upload-list")).to_contain_text("resuming: 3 of 5 parts (24.0 MiB) kept from the earlier attempt")
    expect(page.locator("#upload-status")).to_contain_text("Uploaded 1 file(s)", timeout=60_000)
    assert sorted(int(re.search(r"partNumber=(\d+)", url).group(1)) for url in puts) == [4, 5]
    expect(_row(page, "features.npy")).to_contain_text(hashlib.sha256(data).hexdigest()[:12], timeout=60_000)
    assert StoredFile.objects.get().size == len(data)


def test_a_refusal_is_shown_next_to_the_file(page, live_server, local_site, tmp_path, object_store):
    local_site.project.storage_quota_bytes = MiB
    local_site.project.save()
    big = tmp_path / "too-big.bin"
    big.write_bytes(os.urandom(2 * MiB))
    log_in(page, live_server.url, "alice")
    page.goto(live_server.url + "/data/")
    page.get_by_label("Files", exact=True).set_input_files(str(big))
    page.get_by_role("button", name="Upload").click()
    expect(page.locator("#upload-list li[data-state=error]")).to_contain_text("left of its 1.0 MiB")
    expect(page.locator("#upload-status")).to_contain_text("1 of 1 file(s) not uploaded")


def test_without_an_object_store_the_page_uploads_through_the_portal(page, live_server, local_site, tmp_path,
                                                                    filesystem_storage):
    from portal.storage.models import StoredFile

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
    assert seen and [100, "100 % of 8.0 MiB sent", False] in seen
    assert all(not text or "of 8.0 MiB" in text for _, text, _ in seen)  # the answer's download is not shown


def test_a_file_and_a_folder_are_named_as_datasets_on_the_data_page_and_a_wrong_name_keeps_what_was_typed(
        page, live_server, local_site, filesystem_storage):
    from django.core.files.uploadedfile import SimpleUploadedFile

    from portal.storage import actions
    from portal.storage.models import Dataset, DatasetKind

    for path in ("cifar/train/batch_1.bin", "cifar/labels.txt", "weights.bin"):
        actions.store_file(local_site.alice, local_site.project, SimpleUploadedFile(path, b"0123456789"), path=path)
    log_in(page, live_server.url, "alice")
    page.goto(live_server.url + "/data/")
    form = page.locator("#dataset-form")
    expect(page.locator("#no-datasets")).to_be_visible()

    # A name a job could not use: the reason beside the name, and the path typed is still there.
    form.get_by_label("Dataset name").fill("../cifar")
    form.get_by_label("A folder (every file under it)").check()
    form.get_by_label("Its file or folder").fill("cifar")
    form.get_by_role("button", name="Name dataset").click()
    expect(page.locator("#dataset-form .invalid-feedback")).to_contain_text("is not a valid dataset name")
    expect(page.locator("#dataset-form").get_by_label("Its file or folder")).to_have_value("cifar")
    expect(page.locator("#dataset-form").get_by_label("A folder (every file under it)")).to_be_checked()
    assert not Dataset.objects.exists()
    assert_no_violations(page, "the Data page with a dataset name refused")

    # The folder, then a file.
    page.locator("#dataset-form").get_by_label("Dataset name").fill("cifar")
    page.locator("#dataset-form").get_by_role("button", name="Name dataset").click()
    expect(page.get_by_role("alert").filter(has_text="as dataset cifar")).to_be_visible()
    form = page.locator("#dataset-form")
    form.get_by_label("Dataset name").fill("weights")
    form.get_by_label("Its file or folder").fill("weights.bin")
    form.get_by_role("button", name="Name dataset").click()
    table = page.locator("#dataset-table")
    expect(table.locator("tr", has_text="weights")).to_contain_text("weights.bin")
    expect(table.locator("tr", has_text="cifar")).to_contain_text("cifar")
    folder = Dataset.objects.get(name="cifar")
    assert (folder.kind, folder.prefix, folder.project, folder.size) == (DatasetKind.FOLDER, "cifar", local_site.project, 20)
    assert Dataset.objects.get(name="weights").stored_file.path == "weights.bin"

    # The same name again: refused with the reason, nothing replaced.
    form = page.locator("#dataset-form")
    form.get_by_label("Dataset name").fill("weights")
    form.get_by_label("Its file or folder").fill("cifar/labels.txt")
    form.get_by_role("button", name="Name dataset").click()
    expect(page.locator("#dataset-form .invalid-feedback")).to_contain_text("already has a dataset named weights")
    assert Dataset.objects.get(name="weights").stored_file.path == "weights.bin"
