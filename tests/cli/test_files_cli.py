"""Managing files, datasets and unfinished uploads with the `kakehashi` command against a live portal: files,
mkdir, mv, rm (-r), datasets --rename/--delete, uploads (--abort). Another project's files are not found."""

from __future__ import annotations

import pytest
from django.core.files.base import ContentFile

from portal.api.tokens import issue_token
from portal.audit.models import AuditEntry
from portal.storage import actions, datasets, uploads
from portal.storage.models import Dataset, StoredFile, UploadSession, UploadState

pytestmark = pytest.mark.django_db(transaction=True)


def _put(site, path: str, data: bytes = b"1,2\n"):
    actions.store_file(site.alice, site.project, ContentFile(data, name="f"), path=path)


def test_a_researcher_lists_makes_moves_and_deletes_files_and_folders_from_the_command_line(
        logged_in, local_site, filesystem_storage):
    kh = logged_in
    _put(local_site, "raw/a.csv")
    _put(local_site, "raw/b.csv", b"x" * 2048)

    assert kh("mkdir", "results", "--project", "vision").out.strip() == "Made folder results/ in vision."
    listed = kh("files", "vision")
    assert listed.code == 0, listed.err
    assert "results/" in listed.out and "(empty folder)" in listed.out
    assert "raw/b.csv" in listed.out and "2.0 KiB" in listed.out

    moved = kh("mv", "raw", "results/", "--project", "vision")
    assert moved.code == 0, moved.err
    assert moved.out.strip() == "Moved raw to results/raw in vision (2 file(s))."
    renamed = kh("mv", "results/raw/a.csv", "results/raw/first.csv", "--project", "vision")
    assert renamed.code == 0, renamed.err
    assert sorted(StoredFile.objects.values_list("path", flat=True)) == ["results/raw/b.csv", "results/raw/first.csv"]

    folder = kh("rm", "results/raw", "--project", "vision")
    assert folder.code == 3
    assert "results/raw is a folder: delete it with recursive true" in folder.err
    gone = kh("rm", "-r", "results", "--project", "vision")
    assert gone.code == 0, gone.err
    assert gone.out.strip() == "Deleted results/ from vision (2 file(s), 2.0 KiB)."
    assert not StoredFile.objects.exists()
    assert kh("files", "vision").out.startswith("Project vision has no files yet")
    assert AuditEntry.objects.filter(action="folder.delete", actor=local_site.alice).count() == 1


def test_datasets_are_renamed_and_deleted_and_one_a_queued_job_uses_is_refused_naming_the_job(
        logged_in, local_site, filesystem_storage, no_live_worker):
    from portal.jobs.actions.submit import submit_job
    from portal.jobs.actions.validation import JobRequest

    kh = logged_in
    _put(local_site, "train.csv")
    datasets.create_dataset(local_site.alice, local_site.project, name="train", path="train.csv")
    renamed = kh("datasets", "vision", "--rename", "train", "train-v1")
    assert renamed.code == 0, renamed.err
    assert "Renamed dataset train of vision to train-v1" in renamed.out
    job = submit_job(local_site.alice, JobRequest(
        project=local_site.project, name="reads", script="true", hardware=local_site.hardware, walltime="00:05:00",
        datasets=["train-v1"])).job

    refused = kh("datasets", "vision", "--delete", "train-v1")
    assert refused.code == 3
    assert f"refused (409 in_use) [name]: dataset train-v1 is used by job {job.pk} (queued)" in refused.err
    refused = kh("rm", "train.csv", "--project", "vision")
    assert refused.code == 3 and "train.csv is dataset train-v1: delete the dataset first" in refused.err

    job.datasets.clear()
    deleted = kh("datasets", "vision", "--delete", "train-v1")
    assert deleted.code == 0, deleted.err
    assert deleted.out.strip() == "Deleted dataset train-v1 of vision (its files stay)."
    assert not Dataset.objects.exists() and StoredFile.objects.filter(path="train.csv").exists()


def test_unfinished_uploads_are_listed_and_aborted_from_the_command_line(logged_in, local_site):
    kh = logged_in
    session, _ = uploads.create_upload(local_site.alice, local_site.project, path="big.tar", size=12 * 1024 * 1024)
    listed = kh("uploads", "vision")
    assert listed.code == 0, listed.err
    assert str(session.pk) in listed.out and "big.tar" in listed.out and "12.0 MiB" in listed.out
    aborted = kh("uploads", "vision", "--abort", str(session.pk))
    assert aborted.code == 0, aborted.err
    assert "Aborted the upload of big.tar (12.0 MiB) in vision: its space is free again." in aborted.out
    assert UploadSession.objects.get(pk=session.pk).state == UploadState.ABORTED
    assert kh("uploads", "vision").out.strip() == "You have no unfinished uploads in vision."


def test_another_projects_files_and_datasets_cannot_be_moved_deleted_or_listed(
        kh, live_server, local_site, filesystem_storage):
    _put(local_site, "secret.csv")
    datasets.create_dataset(local_site.alice, local_site.project, name="secret", path="secret.csv")
    token = issue_token(local_site.mallory, name="t", scopes=["read", "submit"])[1]
    assert kh("login", "--url", live_server.url, "--token", token).code == 0
    for args in (["rm", "secret.csv", "--project", "vision"], ["mv", "secret.csv", "x.csv", "--project", "vision"],
                 ["mkdir", "x", "--project", "vision"], ["files", "vision"], ["uploads", "vision"],
                 ["datasets", "vision", "--delete", "secret"], ["datasets", "vision", "--rename", "secret", "s2"]):
        result = kh(*args)
        assert result.code == 3, (args, result.out)
        assert "404 not_found" in result.err, (args, result.err)
    assert StoredFile.objects.filter(path="secret.csv").exists() and Dataset.objects.filter(name="secret").exists()
