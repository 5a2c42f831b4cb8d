"""Managing files and datasets on the Data page, in Chromium: rename, move, delete files and folders, make
folders, rename and delete datasets, see and abort unfinished uploads. What is in use is refused, saying by what."""

from __future__ import annotations

import re

import pytest
from django.core.files.base import ContentFile
from playwright.sync_api import expect

from portal.audit.models import AuditEntry
from portal.storage import actions, datasets, uploads
from portal.storage.models import Dataset, Folder, StoredFile, UploadSession, UploadState
from tests.browser.conftest import log_in

pytestmark = pytest.mark.django_db(transaction=True)


def _put(site, path: str, data: bytes = b"x" * 10):
    return actions.store_file(site.alice, site.project, ContentFile(data, name=path.rsplit("/", 1)[-1]), path=path)[0]


def _manage(page, summary: str):
    """Open a row's Manage disclosure (its summary's accessible name ends with the path)."""
    page.locator("summary").filter(has_text=re.compile(rf"^Manage\s*{re.escape(summary.strip())}$")).click()


def _message(page):
    return page.locator(".alert, .messages, [role=alert], [role=status]").filter(has_text=re.compile(r"\w"))


def test_a_researcher_renames_moves_and_deletes_files_and_folders_and_makes_a_folder(
        page, live_server, local_site, filesystem_storage, shots):
    _put(local_site, "notes.txt", b"hello")
    _put(local_site, "raw/a.csv", b"1,2\n")
    _put(local_site, "raw/b.csv", b"3,4\n")
    page.on("dialog", lambda dialog: dialog.accept())
    log_in(page, live_server.url, "alice", next_path="/data/?project=vision")

    # Rename a file.
    _manage(page, " notes.txt")
    page.get_by_label("New path of notes.txt").fill("docs/readme.txt")
    page.get_by_role("form", name="Rename or move notes.txt").get_by_role("button", name="Rename or move").click()
    expect(page.get_by_text("Moved notes.txt to docs/readme.txt in vision.")).to_be_visible()
    expect(page.get_by_role("link", name="docs/readme.txt", exact=True)).to_be_visible()
    assert StoredFile.objects.get(path="docs/readme.txt").size == 5

    # Make a folder, then move a folder of files into it.
    page.get_by_label("New folder").fill("archive")
    page.get_by_role("button", name="Make folder").click()
    expect(page.get_by_text("Made folder archive/ in vision.")).to_be_visible()
    expect(page.locator("#folder-list [data-folder='archive']")).to_be_visible()
    _manage(page, " folder raw")
    page.get_by_label("New path of folder raw", exact=True).fill("archive/")
    page.get_by_role("form", name="Rename or move folder raw", exact=True).get_by_role(
        "button", name="Rename or move").click()
    expect(page.get_by_text("Moved raw to archive/raw in vision.")).to_be_visible()
    expect(page.get_by_role("link", name="archive/raw/a.csv", exact=True)).to_be_visible()
    shots(page, "moved")

    # The moved file downloads with its bytes (they never moved: only the path did).
    with page.expect_download() as download:
        page.get_by_role("link", name="archive/raw/a.csv", exact=True).click()
    assert open(download.value.path(), "rb").read() == b"1,2\n"

    # Delete a file, then the folder with what is left in it.
    _manage(page, " archive/raw/b.csv")
    page.get_by_role("button", name="Delete archive/raw/b.csv").click()
    expect(page.get_by_text("Deleted archive/raw/b.csv from vision.")).to_be_visible()
    _manage(page, " folder archive")
    page.get_by_role("button", name="Delete folder archive", exact=True).click()
    expect(page.get_by_text(re.compile(r"Deleted folder archive/ \(1 file\(s\), 4 B\) from vision\."))).to_be_visible()
    assert list(StoredFile.objects.values_list("path", flat=True)) == ["docs/readme.txt"]
    assert not Folder.objects.exists()
    assert not list((filesystem_storage / "projects" / "vision" / "raw").glob("*"))  # the bytes went too
    assert [e.action for e in AuditEntry.objects.filter(action__in=[
        "file.move", "folder.create", "folder.move", "file.delete", "folder.delete"]).order_by("pk")] == [
        "file.move", "folder.create", "folder.move", "file.delete", "folder.delete"]


def test_what_a_dataset_or_a_queued_job_uses_is_refused_saying_which_and_a_dataset_is_renamed(
        page, live_server, local_site, filesystem_storage, no_live_worker):
    from portal.jobs.actions.submit import submit_job
    from portal.jobs.actions.validation import JobRequest

    _put(local_site, "corpus/train.txt", b"abc")
    _put(local_site, "weights.bin", b"w" * 2048)
    datasets.create_dataset(local_site.alice, local_site.project, name="corpus", prefix="corpus")
    datasets.create_dataset(local_site.alice, local_site.project, name="weights", path="weights.bin")
    job = submit_job(local_site.alice, JobRequest(
        project=local_site.project, name="reads", script="cat $KAKEHASHI_DATA/corpus/train.txt",
        hardware=local_site.hardware, walltime="00:05:00", datasets=["corpus"])).job
    page.on("dialog", lambda dialog: dialog.accept())
    log_in(page, live_server.url, "alice", next_path="/data/?project=vision")

    # Sizes on the Data page follow one rule: binary units, as files show them.
    expect(page.locator("#dataset-table tr", has_text="weights")).to_contain_text("2.0 KiB")

    _manage(page, " weights.bin")
    page.get_by_role("button", name="Delete weights.bin").click()
    expect(_message(page).filter(has_text="weights.bin is dataset weights: delete the dataset first")).to_be_visible()

    _manage(page, " corpus/train.txt")
    page.get_by_role("button", name="Delete corpus/train.txt").click()
    expect(_message(page).filter(has_text=f"corpus/train.txt is in use by job {job.pk} (queued)")).to_be_visible()

    _manage(page, " dataset corpus")
    page.get_by_role("button", name="Delete dataset corpus").click()
    expect(_message(page).filter(has_text=f"dataset corpus is used by job {job.pk} (queued)")).to_be_visible()
    assert Dataset.objects.filter(name="corpus").exists()

    _manage(page, " dataset weights")
    page.get_by_label("New name of dataset weights").fill("weights-v1")
    page.get_by_role("button", name="Rename", exact=True).click()
    expect(page.get_by_text("Renamed dataset weights of vision to weights-v1")).to_be_visible()
    _manage(page, " dataset weights-v1")
    page.get_by_role("button", name="Delete dataset weights-v1").click()
    expect(page.get_by_text("Deleted dataset weights-v1 of vision (its files stay).")).to_be_visible()
    assert StoredFile.objects.filter(path="weights.bin").exists()
    assert not Dataset.objects.filter(name__startswith="weights").exists()


def test_unfinished_uploads_are_listed_and_aborting_one_frees_the_quota_the_refusal_spoke_of(
        page, live_server, local_site, settings):
    MiB = 1024 * 1024
    local_site.project.storage_quota_bytes = 20 * MiB
    local_site.project.save()
    session, _ = uploads.create_upload(local_site.alice, local_site.project, path="big/video.mp4", size=15 * MiB)
    with pytest.raises(actions.QuotaExceeded) as refused:
        uploads.create_upload(local_site.alice, local_site.project, path="other.bin", size=10 * MiB)
    # Nothing stored, so deleting files would not help: the refusal says what would.
    assert "Abort unfinished uploads (the Data page lists them" in refused.value.message
    assert "delete files" not in refused.value.message.lower()

    page.on("dialog", lambda dialog: dialog.accept())
    log_in(page, live_server.url, "alice", next_path="/data/?project=vision")
    box = page.get_by_role("region", name="Your unfinished uploads")
    expect(box).to_contain_text("big/video.mp4 in vision, 15.0 MiB")
    box.get_by_role("button", name="Abort big/video.mp4").click()
    expect(page.get_by_text("Aborted the upload of big/video.mp4 (15.0 MiB): its space is free again.")).to_be_visible()
    expect(page.get_by_role("region", name="Your unfinished uploads")).to_have_count(0)
    session.refresh_from_db()
    assert session.state == UploadState.ABORTED
    uploads.create_upload(local_site.alice, local_site.project, path="other.bin", size=10 * MiB)  # fits now
    assert UploadSession.objects.filter(state=UploadState.OPEN).count() == 1


@pytest.mark.worker
def test_a_jobs_page_says_what_data_it_was_given_even_after_the_files_change(
        page, live_server, local_site, live_worker):
    import hashlib

    from portal.jobs.actions.submit import submit_job
    from portal.jobs.actions.validation import JobRequest
    from portal.storage import manage
    from tests.conftest import ended_job, wait_for
    from tests.storage.test_datasets_reach_jobs import upload

    first, second = b"first version\n", b"second version, longer\n"
    upload(local_site.alice, local_site.project, "corpus/train.txt", first)
    datasets.create_dataset(local_site.alice, local_site.project, name="corpus", prefix="corpus")
    job = submit_job(local_site.alice, JobRequest(
        project=local_site.project, name="reads", script="cat $KAKEHASHI_DATA/corpus/train.txt",
        hardware=local_site.hardware, walltime="00:05:00", datasets=["corpus"])).job
    assert wait_for(lambda: ended_job(job.pk), timeout=60, message="the job to end").state == "completed"
    given = f"corpus: corpus/train.txt, 14 B, SHA-256 {hashlib.sha256(first).hexdigest()[:12]}"

    manage.move(local_site.alice, local_site.project, "corpus/train.txt", "corpus/old.txt")
    log_in(page, live_server.url, "alice", next_path=f"/jobs/{job.pk}/")
    expect(page.locator("#pinned-data")).to_contain_text(given)
    expect(page.locator("#pinned-data")).to_contain_text("now at corpus/old.txt")

    manage.delete_file(local_site.alice, local_site.project, "corpus/old.txt")  # the job has ended: allowed
    upload(local_site.alice, local_site.project, "corpus/train.txt", second)
    page.reload()
    expect(page.locator("#pinned-data")).to_contain_text(given)
    expect(page.locator("#pinned-data")).to_contain_text("replaced since")
