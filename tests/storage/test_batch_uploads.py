"""Many small files uploaded at once (a dataset folder): one request signs a batch of single PUTs, one completes
them (portal/storage/batch_uploads.py). Against the real SeaweedFS: the store checks each file's SHA-256."""

from __future__ import annotations

import base64
import hashlib
import os
from datetime import timedelta

import pytest
import requests
from django.conf import settings as django_settings

from portal.audit.models import AuditEntry
from portal.projects.models import Membership, Role
from portal.storage.models import StoredFile, UploadSession, UploadState

pytestmark = pytest.mark.django_db
BATCH = "/api/v1/projects/vision/uploads/batch/"


def entry(path: str, data: bytes) -> dict:
    return {"path": path, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def put_all(uploads: list[dict], contents: dict[str, bytes]) -> None:
    for upload in uploads:
        if upload["state"] == "upload":
            answer = requests.put(upload["url"], data=contents[upload["path"]], headers=upload["headers"], timeout=30)
            assert answer.status_code == 200, answer.text


def test_a_folder_of_files_is_signed_in_one_request_sent_straight_to_the_store_and_completed_in_one(
        alice_api, local_site, object_store):
    contents = {f"imagenet/train/n{i:03d}/img {i}.JPEG": os.urandom(1000 + i) for i in range(120)}
    contents["imagenet/ラベル.txt"] = "猫\n".encode()
    created = alice_api.post(BATCH, {"files": [entry(p, d) for p, d in contents.items()]})
    assert created.status_code == 201, created.content
    uploads = created.json()["uploads"]
    assert [u["path"] for u in uploads] == list(contents) and {u["state"] for u in uploads} == {"upload"}
    assert UploadSession.objects.filter(state=UploadState.OPEN).count() == len(contents)  # each its own row
    put_all(uploads, contents)
    done = alice_api.post(BATCH + "complete/", {"ids": [u["id"] for u in uploads]})
    assert done.status_code == 200, done.content
    assert done.json()["missing"] == [] and len(done.json()["files"]) == len(contents)
    for row in StoredFile.objects.filter(project=local_site.project):
        assert row.state == "ready" and row.sha256 == hashlib.sha256(contents[row.path]).hexdigest()
        body = object_store.client().get_object(Bucket=django_settings.KAKEHASHI_S3_BUCKET, Key=row.storage_name)
        assert body["Body"].read() == contents[row.path]
    assert AuditEntry.objects.filter(action="file.upload_batch").count() == 1
    assert len(AuditEntry.objects.get(action="file.upload_batch").data["files"]) == len(contents)

    # The same folder again: every file is present, nothing to send; one changed file is refused without overwrite
    # (nothing recorded), and with it only that file is sent.
    again = alice_api.post(BATCH, {"files": [entry(p, d) for p, d in contents.items()]}).json()["uploads"]
    assert {u["state"] for u in again} == {"present"} and not any("url" in u for u in again)
    changed = dict(contents)
    changed["imagenet/ラベル.txt"] = "犬\n".encode()
    refused = alice_api.post(BATCH, {"files": [entry(p, d) for p, d in changed.items()]})
    assert refused.status_code == 409 and "already exists" in refused.json()["detail"]
    assert UploadSession.objects.filter(state=UploadState.OPEN).count() == 0
    replaced = alice_api.post(BATCH, {"files": [entry(p, d) for p, d in changed.items()], "overwrite": True})
    sending = [u for u in replaced.json()["uploads"] if u["state"] == "upload"]
    assert [u["path"] for u in sending] == ["imagenet/ラベル.txt"]
    old_key = StoredFile.objects.get(path="imagenet/ラベル.txt").storage_name
    put_all(sending, changed)
    assert alice_api.post(BATCH + "complete/", {"ids": [sending[0]["id"]]}).json()["missing"] == []
    row = StoredFile.objects.get(path="imagenet/ラベル.txt")
    assert row.sha256 == hashlib.sha256("犬\n".encode()).hexdigest() and row.storage_name != old_key


def test_bytes_that_are_not_the_declared_checksum_are_refused_by_the_store_and_never_listed(alice_api, object_store):
    data = b"the real bytes"
    upload = alice_api.post(BATCH, {"files": [entry("d/a.txt", data)]}).json()["uploads"][0]
    tampered = requests.put(upload["url"], data=b"other bytes!!!", headers=upload["headers"], timeout=30)
    assert tampered.status_code == 400 and "BadDigest" in tampered.text
    unsigned = requests.put(upload["url"], data=data, timeout=30)  # without the signed checksum header
    assert unsigned.status_code == 403
    done = alice_api.post(BATCH + "complete/", {"ids": [upload["id"]]}).json()
    assert done == {"files": [], "missing": [upload["id"]]}
    assert not StoredFile.objects.exists()
    # Sent properly (the same batch again resumes the open upload with a fresh URL), it completes.
    again = alice_api.post(BATCH, {"files": [entry("d/a.txt", data)]}).json()["uploads"][0]
    assert again["id"] == upload["id"]
    put_all([again], {"d/a.txt": data})
    assert len(alice_api.post(BATCH + "complete/", {"ids": [upload["id"]]}).json()["files"]) == 1


def test_an_older_object_at_the_key_is_not_taken_for_a_new_upload_of_it(alice_api, object_store):
    data = b"x" * 100
    upload = alice_api.post(BATCH, {"files": [entry("d/old.bin", data)]}).json()["uploads"][0]
    session = UploadSession.objects.get(pk=upload["id"])
    # An object of the same size was left at that key before this upload was created (one never completed).
    object_store.client().put_object(Bucket=django_settings.KAKEHASHI_S3_BUCKET, Key=session.key, Body=b"y" * 100)
    UploadSession.objects.filter(pk=session.pk).update(created_at=session.created_at + timedelta(minutes=5))
    assert alice_api.post(BATCH + "complete/", {"ids": [upload["id"]]}).json()["missing"] == [upload["id"]]


@pytest.mark.parametrize("files, status, words", [
    ([{"path": "a/../b", "size": 1, "sha256": "0" * 64}], 400, "'..'"),
    ([{"path": "a", "size": 1, "sha256": "0" * 64}, {"path": "a/b", "size": 1, "sha256": "0" * 64}], 400,
     "both a file and a folder"),
    ([{"path": "a", "size": 1, "sha256": "0" * 64}] * 2, 400, "twice"),
    ([{"path": "a", "size": 1, "sha256": "xyz"}], 400, "sha256"),
    ([{"path": "big", "size": 65 * 1024 * 1024, "sha256": "0" * 64}], 400, "size"),
    ([], 400, "files"),
    ([{"path": "line\nbreak", "size": 1, "sha256": "0" * 64}], 400, "line breaks"),
])
def test_a_batch_with_a_bad_file_is_refused_whole_and_records_nothing(alice_api, files, status, words):
    answer = alice_api.post(BATCH, {"files": files})
    assert answer.status_code == status and words in answer.content.decode(), answer.content
    assert not UploadSession.objects.exists()


def test_a_batch_over_the_quota_records_nothing(alice_api, local_site, settings):
    settings.KAKEHASHI_STORAGE_QUOTA_BYTES = 1000
    answer = alice_api.post(BATCH, {"files": [entry(f"q/{i}", b"z" * 300) for i in range(4)]})
    assert answer.status_code == 413 and "quota" in answer.json()["detail"]
    assert not UploadSession.objects.exists()


def test_other_projects_viewers_and_read_only_tokens_can_neither_start_nor_complete_a_batch(
        alice_api, mallory_api, local_site, make_user, api_as):
    upload = alice_api.post(BATCH, {"files": [entry("d/x", b"x")]}).json()["uploads"][0]
    assert mallory_api.post(BATCH, {"files": [entry("d/y", b"y")]}).status_code == 404
    assert mallory_api.post(BATCH + "complete/", {"ids": [upload["id"]]}).status_code == 404
    # mallory's own project's URL does not reach alice's upload either
    stolen = mallory_api.post("/api/v1/projects/nlp/uploads/batch/complete/", {"ids": [upload["id"]]})
    assert stolen.status_code == 404 and "no upload of yours" in stolen.content.decode()
    viewer = make_user("victor")
    Membership.objects.create(user=viewer, project=local_site.project, role=Role.VIEWER)
    assert api_as(viewer, "read", "submit").post(BATCH, {"files": [entry("d/z", b"z")]}).status_code == 403
    assert api_as(local_site.alice, "read").post(BATCH, {"files": [entry("d/z", b"z")]}).status_code == 403
    assert UploadSession.objects.count() == 1


def test_sha256_in_base64_is_what_the_url_binds(alice_api):
    data = b"abc"
    upload = alice_api.post(BATCH, {"files": [entry("d/abc", data)]}).json()["uploads"][0]
    assert upload["headers"] == {"x-amz-checksum-sha256": base64.b64encode(hashlib.sha256(data).digest()).decode()}
