"""Direct uploads to the object store (a real SeaweedFS): the portal signs, the store receives and checks the bytes.

Every refusal here is the store's own (signatures, expiry, checksums) or the portal's (paths, quota, roles),
tested over real HTTP against the real server: moto accepts tampered URLs and wrong checksums.
"""

from __future__ import annotations

import base64
import hashlib
import os
import sys
import time
from datetime import timedelta

import pytest
import requests
from django.conf import settings as django_settings
from django.urls import reverse
from django.utils import timezone

from portal.projects.models import Membership, Role
from portal.storage import quota, uploads, verify
from portal.storage.models import FileState, StoredFile, UploadSession, UploadState
from portal.storage.tasks import abort_abandoned_uploads_task
from tests.conftest import wait_for

pytestmark = pytest.mark.django_db
sys.path.insert(0, str(django_settings.BASE_DIR / "cli"))  # this checkout's CLI, whichever one is installed

UPLOADS = "/api/v1/projects/vision/uploads/"
MiB = 1024 * 1024


@pytest.fixture(autouse=True)
def small_parts(settings):
    settings.KAKEHASHI_UPLOAD_PART_BYTES = 5 * MiB  # S3's smallest: several parts from small files


@pytest.fixture(autouse=True)
def no_open_uploads_in_the_store(object_store):
    """Each test starts with no multipart upload in the bucket (the database is rolled back, the store is not)."""
    client, bucket = object_store.client(), django_settings.KAKEHASHI_S3_BUCKET
    for upload in client.list_multipart_uploads(Bucket=bucket).get("Uploads", []):
        client.abort_multipart_upload(Bucket=bucket, Key=upload["Key"], UploadId=upload["UploadId"])


def sha_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha_b64(data: bytes) -> str:
    return base64.b64encode(hashlib.sha256(data).digest()).decode()


def parts_of(data: bytes, part_size: int) -> dict[int, bytes]:
    return {i // part_size + 1: data[i:i + part_size] for i in range(0, len(data), part_size)} or {1: b""}


def start(api, data: bytes, path: str = "data/x.bin", **extra):
    return api.post(UPLOADS, {"path": path, "size": len(data), "sha256": sha_hex(data), **extra})


def sign(api, upload: dict, parts: dict[int, bytes]):
    body = {"parts": [{"number": n, "sha256": sha_b64(chunk)} for n, chunk in parts.items()]}
    return api.post(f"{UPLOADS}{upload['id']}/parts/", body)


def send(api, upload: dict, parts: dict[int, bytes]) -> list[dict]:
    """Sign and PUT each part as an uploader does; every PUT must be accepted by the store. Returns the ETags
    the store answered with, as uploaders report them at completion."""
    signed = sign(api, upload, parts)
    assert signed.status_code == 200, signed.content
    etags = []
    for part in signed.json()["parts"]:
        put = requests.put(part["url"], data=parts[part["number"]], headers=part["headers"], timeout=60)
        assert put.status_code == 200, put.text
        etags.append({"number": part["number"], "etag": put.headers["ETag"]})
    return etags


def complete(api, upload: dict):
    return api.post(f"{UPLOADS}{upload['id']}/complete/")


def store_uploads(object_store) -> list[str]:
    answer = object_store.client().list_multipart_uploads(Bucket=django_settings.KAKEHASHI_S3_BUCKET)
    return [u["UploadId"] for u in answer.get("Uploads", [])]


def stored_bytes(object_store, key: str) -> bytes:
    return object_store.client().get_object(Bucket=django_settings.KAKEHASHI_S3_BUCKET, Key=key)["Body"].read()


# ------------------------------------------------------------------------------------------- the happy path


@pytest.mark.django_db(transaction=True)
def test_a_200_mb_file_goes_to_the_store_in_parallel_parts_and_downloads_with_range(
        live_server, local_site, issue, tmp_path, object_store, live_worker):
    # The CLI's uploader, driven from Python: the same requests `kakehashi upload` makes.
    from kakehashi_cli.client import Client
    from kakehashi_cli.upload import Uploader

    local = tmp_path / "imagenet-shard.tar"
    with open(local, "wb") as handle:
        for _ in range(25):
            handle.write(os.urandom(8 * MiB))
    data = local.read_bytes()
    client = Client(live_server.url, issue(local_site.alice, "read", "submit"))
    stored = Uploader(client, "vision", threads=4).upload_file(str(local), "datasets/imagenet-shard.tar")

    assert stored["size"] == 200 * MiB and stored["sha256"] == sha_hex(data) and stored["state"] == "verifying"
    session = UploadSession.objects.get()
    assert session.state == UploadState.COMPLETED and session.part_count == 40
    # A worker reads the joined object back and hashes it: the file is usable only then.
    row = wait_for(lambda: StoredFile.objects.filter(state=FileState.READY).first(), timeout=120,
                   message="the worker to verify the whole file's SHA-256")
    assert row.storage_name == "projects/vision/datasets/imagenet-shard.tar"
    assert hashlib.sha256(stored_bytes(object_store, row.storage_name)).hexdigest() == sha_hex(data)
    assert store_uploads(object_store) == []

    # Downloads are presigned GETs of the store: the portal answers with a redirect, Range works.
    response = requests.get(stored["download_url"], headers={"Authorization": f"Bearer {client.token}"},
                            allow_redirects=False, timeout=30)
    assert response.status_code == 302 and response.headers["X-Checksum-SHA256"] == sha_hex(data)
    url = response.headers["Location"]
    assert url.startswith(object_store.endpoint) and "X-Amz-Signature=" in url
    ranged = requests.get(url, headers={"Range": f"bytes={150 * MiB}-{150 * MiB + 99}"}, timeout=30)
    assert ranged.status_code == 206 and ranged.content == data[150 * MiB:150 * MiB + 100]
    assert 'filename="imagenet-shard.tar"' in ranged.headers["Content-Disposition"]


# ------------------------------------------------------------------------------------------------ resuming


def test_an_interrupted_upload_resumes_from_the_parts_the_store_holds(alice_api, object_store):
    data = os.urandom(17 * MiB)
    parts = parts_of(data, 5 * MiB)
    first = start(alice_api, data)
    assert first.status_code == 201, first.content
    upload = first.json()
    assert upload["part_size"] == 5 * MiB and upload["part_count"] == 4 and upload["resumed"] is False
    send(alice_api, upload, {1: parts[1], 2: parts[2]})
    # The connection drops here; later the same file is offered again (a reopened tab, the CLI run again).
    again = start(alice_api, data)
    assert again.status_code == 200 and again.json()["id"] == upload["id"] and again.json()["resumed"] is True
    held = alice_api.get(f"{UPLOADS}{upload['id']}/parts/").json()["parts"]
    assert [(p["number"], p["size"]) for p in held] == [(1, 5 * MiB), (2, 5 * MiB)]
    early = complete(alice_api, upload)
    assert early.status_code == 400 and "2 of 4 parts are not uploaded yet (part 3, 4)" in early.json()["detail"]
    assert not StoredFile.objects.exists()

    send(alice_api, upload, {3: parts[3], 4: parts[4]})
    done = complete(alice_api, upload)
    assert done.status_code == 201, done.content
    assert done.json()["size"] == len(data) and done.json()["sha256"] == sha_hex(data)
    assert stored_bytes(object_store, StoredFile.objects.get().storage_name) == data


def test_the_whole_files_sha256_may_come_with_completion_and_is_needed_by_then(alice_api, object_store):
    data = os.urandom(7 * MiB)
    upload = alice_api.post(UPLOADS, {"path": "late.bin", "size": len(data)}).json()
    send(alice_api, upload, parts_of(data, 5 * MiB))
    missing = complete(alice_api, upload)
    assert missing.status_code == 400 and missing.json()["field"] == "sha256"
    done = alice_api.post(f"{UPLOADS}{upload['id']}/complete/", {"sha256": sha_hex(data)})
    assert done.status_code == 201 and done.json()["sha256"] == sha_hex(data)


def test_a_resumed_upload_tells_which_bytes_each_held_part_has(alice_api):
    """A file changed between two attempts (same path and size): the uploader sees the held part is not its own."""
    before, after = os.urandom(6 * MiB), os.urandom(6 * MiB)
    upload = alice_api.post(UPLOADS, {"path": "edited.bin", "size": len(before)}).json()
    send(alice_api, upload, {1: before[:5 * MiB]})
    again = alice_api.post(UPLOADS, {"path": "edited.bin", "size": len(after)}).json()
    assert again["id"] == upload["id"] and again["resumed"] is True
    [held] = alice_api.get(f"{UPLOADS}{upload['id']}/parts/").json()["parts"]
    assert held["sha256"] == sha_b64(before[:5 * MiB]) != sha_b64(after[:5 * MiB])
    etags = send(alice_api, upload, parts_of(after, 5 * MiB))  # every part again: the new bytes replace the old
    done = alice_api.post(f"{UPLOADS}{upload['id']}/complete/", {"sha256": sha_hex(after), "parts": etags})
    assert done.status_code == 201, done.content
    conflicting = alice_api.post(UPLOADS, {"path": "x.bin", "size": 3, "sha256": sha_hex(b"abc")}).json()
    send(alice_api, conflicting, {1: b"abc"})
    refused = alice_api.post(f"{UPLOADS}{conflicting['id']}/complete/", {"sha256": sha_hex(b"abd")})
    assert refused.status_code == 400 and "differs from the one given" in refused.json()["detail"]


def test_a_different_file_at_the_same_path_is_a_new_upload_not_a_resumed_one(alice_api):
    one, other = os.urandom(6 * MiB), os.urandom(6 * MiB)
    a, b = start(alice_api, one).json(), start(alice_api, other).json()
    assert a["id"] != b["id"] and b["resumed"] is False
    assert UploadSession.objects.get(pk=a["id"]).key != UploadSession.objects.get(pk=b["id"]).key


# ----------------------------------------------------------------------------------------------- integrity


def test_a_part_whose_bytes_do_not_match_its_checksum_is_refused_by_the_store(alice_api, object_store):
    data = os.urandom(6 * MiB)
    upload = start(alice_api, data).json()
    signed = sign(alice_api, upload, {1: data[:5 * MiB]}).json()["parts"][0]
    corrupted = bytearray(data[:5 * MiB])
    corrupted[1000] ^= 0xFF
    bad = requests.put(signed["url"], data=bytes(corrupted), headers=signed["headers"], timeout=30)
    assert bad.status_code == 400 and "<Code>BadDigest</Code>" in bad.text
    # Leaving the checksum header out does not get round it: the header is part of the signature.
    bare = requests.put(signed["url"], data=bytes(corrupted), timeout=30)
    assert bare.status_code == 403 and "SignatureDoesNotMatch" in bare.text
    assert alice_api.get(f"{UPLOADS}{upload['id']}/parts/").json()["parts"] == []
    refused = complete(alice_api, upload)
    assert refused.status_code == 400 and not StoredFile.objects.exists()


def test_a_file_whose_bytes_are_not_its_claimed_sha256_is_not_stored(alice_api, object_store):
    claimed, sent = b"the file I meant", b"another file!!!!"
    upload = alice_api.post(UPLOADS, {"path": "notes.txt", "size": len(sent), "sha256": sha_hex(claimed)}).json()
    send(alice_api, upload, {1: sent})
    refused = complete(alice_api, upload)
    assert refused.status_code == 400 and refused.json()["field"] == "sha256"
    assert "do not match its sha256" in refused.json()["detail"]
    assert UploadSession.objects.get().state == UploadState.ABORTED and not StoredFile.objects.exists()
    assert store_uploads(object_store) == []


@pytest.mark.django_db(transaction=True)
def test_a_file_of_several_parts_is_hashed_whole_by_a_worker_and_refused_and_removed_if_its_sha256_is_wrong(
        alice_api, local_site, object_store, live_worker):
    right, wrong = os.urandom(11 * MiB), os.urandom(11 * MiB)
    good = start(alice_api, right, path="good.bin").json()
    etags = send(alice_api, good, parts_of(right, 5 * MiB))
    answer = alice_api.post(f"{UPLOADS}{good['id']}/complete/", {"parts": etags})
    assert answer.status_code == 201 and answer.json()["state"] == "verifying"
    # The uploader claims a SHA-256 that is not its bytes': every part matches its own checksum, the whole does not.
    bad = alice_api.post(UPLOADS, {"path": "bad.bin", "size": len(wrong), "sha256": sha_hex(right)}).json()
    etags = send(alice_api, bad, parts_of(wrong, 5 * MiB))
    answer = alice_api.post(f"{UPLOADS}{bad['id']}/complete/", {"parts": etags})
    assert answer.status_code == 201 and answer.json()["state"] == "verifying"

    ready = wait_for(lambda: StoredFile.objects.filter(path="good.bin", state=FileState.READY).first(), timeout=60,
                     message="the good file verified")
    assert alice_api.get(f"/api/v1/projects/vision/files/{ready.pk}/download/").status_code == 302
    refused = wait_for(lambda: UploadSession.objects.filter(pk=bad["id"], state=UploadState.REFUSED).first(),
                       timeout=60, message="the bad file refused")
    assert "do not match its sha256" in refused.reason and sha_hex(wrong) in refused.reason
    assert list(StoredFile.objects.values_list("path", flat=True)) == ["good.bin"]  # the bad one disappeared
    wait_for(lambda: _gone(object_store, refused.key), timeout=30, message="the refused object deleted")
    shown = alice_api.get(f"{UPLOADS}{bad['id']}/").json()
    assert shown["state"] == "refused" and shown["reason"] == refused.reason and shown["file"] is None
    assert quota.usage(local_site.project).stored == len(right)  # the quota no longer counts it
    alice_api.client.force_login(local_site.alice)
    page = alice_api.client.get(reverse("data")).content.decode()
    assert "bad.bin" in page and "do not match its sha256" in page


def _gone(object_store, key: str) -> bool:
    try:
        stored_bytes(object_store, key)
    except Exception:  # noqa: BLE001 - NoSuchKey
        return True
    return False


def test_a_file_being_verified_cannot_be_downloaded_named_as_a_dataset_or_replaced(alice_api, local_site, object_store):
    data = os.urandom(6 * MiB)
    upload = start(alice_api, data, path="checking.bin").json()
    etags = send(alice_api, upload, parts_of(data, 5 * MiB))
    stored = alice_api.post(f"{UPLOADS}{upload['id']}/complete/", {"parts": etags}).json()
    assert stored["state"] == "verifying"
    listed = alice_api.get("/api/v1/projects/vision/files/").json()
    assert [(f["path"], f["state"]) for f in listed["results"]] == [("checking.bin", "verifying")]
    download = alice_api.get(f"/api/v1/projects/vision/files/{stored['id']}/download/")
    assert download.status_code == 409 and download.json()["code"] == "verifying"
    named = alice_api.post("/api/v1/projects/vision/datasets/", {"name": "checking", "path": "checking.bin"})
    assert named.status_code == 409 and "being verified" in named.json()["detail"]
    again = start(alice_api, os.urandom(100), path="checking.bin", overwrite=True)
    assert again.status_code == 409 and again.json()["code"] == "verifying"
    assert verify.verify_upload(upload["id"]) == "verified"
    assert StoredFile.objects.get().state == FileState.READY
    assert alice_api.get(f"/api/v1/projects/vision/files/{stored['id']}/download/").status_code == 302
    assert verify.verify_upload(upload["id"]) == "nothing to verify"  # a retried task changes nothing


def test_a_replacement_whose_sha256_is_wrong_gives_the_file_its_old_bytes_back(alice_api, local_site, object_store):
    old = os.urandom(100)
    first = start(alice_api, old, path="model.pt").json()
    send(alice_api, first, {1: old})
    assert complete(alice_api, first).status_code == 201
    old_key = StoredFile.objects.get().storage_name
    new = os.urandom(6 * MiB)
    replacing = alice_api.post(UPLOADS, {"path": "model.pt", "size": len(new), "sha256": sha_hex(old + b"!"),
                                         "overwrite": True}).json()
    etags = send(alice_api, replacing, parts_of(new, 5 * MiB))
    assert alice_api.post(f"{UPLOADS}{replacing['id']}/complete/", {"parts": etags}).json()["state"] == "verifying"
    assert stored_bytes(object_store, old_key) == old  # kept while the new bytes are checked
    assert verify.verify_upload(replacing["id"]) == "refused"
    row = StoredFile.objects.get()
    assert (row.storage_name, row.size, row.sha256, row.state) == (old_key, len(old), sha_hex(old), FileState.READY)
    assert UploadSession.objects.get(pk=replacing["id"]).state == UploadState.REFUSED


def test_a_verification_lost_with_its_worker_is_asked_for_again_by_the_sweep(alice_api, object_store, monkeypatch):
    data = os.urandom(6 * MiB)
    upload = start(alice_api, data, path="lost.bin").json()
    etags = send(alice_api, upload, parts_of(data, 5 * MiB))
    alice_api.post(f"{UPLOADS}{upload['id']}/complete/", {"parts": etags})
    asked = []
    monkeypatch.setattr(verify, "enqueue", lambda task, *args: asked.append(args))
    assert verify.lost_verifications() == 0  # being verified: touched just now
    UploadSession.objects.filter(pk=upload["id"]).update(last_activity_at=timezone.now() - timedelta(minutes=11))
    assert verify.lost_verifications() == 1 and asked == [(upload["id"],)]


def test_tampered_and_expired_presigned_urls_are_refused_by_the_store(alice_api, settings, object_store):
    data = os.urandom(6 * MiB)
    upload = start(alice_api, data).json()
    part = sign(alice_api, upload, {2: data[5 * MiB:]}).json()["parts"][0]
    as_other_part = part["url"].replace("partNumber=2", "partNumber=1")
    assert as_other_part != part["url"]
    refused = requests.put(as_other_part, data=data[5 * MiB:], headers=part["headers"], timeout=30)
    assert refused.status_code == 403 and "SignatureDoesNotMatch" in refused.text
    signature = part["url"].rsplit("X-Amz-Signature=", 1)[1]
    forged = part["url"].replace(signature, ("0" if signature[0] != "0" else "1") + signature[1:])
    assert requests.put(forged, data=data[5 * MiB:], headers=part["headers"], timeout=30).status_code == 403

    settings.KAKEHASHI_UPLOAD_URL_SECONDS = 1
    short = sign(alice_api, upload, {1: data[:5 * MiB]}).json()["parts"][0]
    time.sleep(2.1)
    expired = requests.put(short["url"], data=data[:5 * MiB], headers=short["headers"], timeout=30)
    assert expired.status_code == 403 and "expired" in expired.text
    assert alice_api.get(f"{UPLOADS}{upload['id']}/parts/").json()["parts"] == []


def test_a_download_url_that_is_tampered_with_or_expired_is_refused(alice_api, settings, object_store):
    data = b"results,0.93\n"
    upload = start(alice_api, data, path="results.csv").json()
    send(alice_api, upload, {1: data})
    stored = complete(alice_api, upload).json()
    url = alice_api.get(f"/api/v1/projects/vision/files/{stored['id']}/download/")["Location"]
    assert requests.get(url, timeout=30).content == data
    other_key = url.replace("/results.csv?", "/other.csv?")
    assert requests.get(other_key, timeout=30).status_code == 403
    settings.KAKEHASHI_DOWNLOAD_URL_SECONDS = 1
    short = alice_api.get(f"/api/v1/projects/vision/files/{stored['id']}/download/")["Location"]
    time.sleep(2.1)
    assert requests.get(short, timeout=30).status_code == 403


def test_completing_an_upload_twice_is_refused_and_lists_the_file_once(alice_api):
    data = os.urandom(1000)
    upload = start(alice_api, data).json()
    send(alice_api, upload, {1: data})
    assert complete(alice_api, upload).status_code == 201
    twice = complete(alice_api, upload)
    assert twice.status_code == 409 and twice.json()["code"] == "already_completed"
    assert sign(alice_api, upload, {1: data}).status_code == 409
    assert StoredFile.objects.count() == 1


def test_an_empty_file_is_complete_at_once(alice_api, object_store):
    answer = start(alice_api, b"", path="empty/.keep")
    assert answer.status_code == 201 and answer.json()["state"] == "completed"
    assert answer.json()["file"]["size"] == 0 and stored_bytes(object_store, "projects/vision/empty/.keep") == b""


# -------------------------------------------------------------------------------------------------- quota


def test_the_quota_refuses_an_upload_and_says_how_much_is_left(alice_api, local_site, object_store):
    local_site.project.storage_quota_bytes = 10 * MiB
    local_site.project.save()
    first = start(alice_api, os.urandom(6 * MiB), path="a.bin")
    assert first.status_code == 201
    refused = start(alice_api, os.urandom(5 * MiB), path="b.bin")
    assert refused.status_code == 413 and refused.json()["code"] == "quota_exceeded"
    detail = refused.json()["detail"]
    assert "has 4.0 MiB (4,194,304 bytes) left of its 10.0 MiB (10,485,760 bytes) storage quota" in detail
    assert "6.0 MiB (6,291,456 bytes) held by unfinished uploads" in detail and "needs 5.0 MiB" in detail
    assert UploadSession.objects.count() == 1 and len(store_uploads(object_store)) == 1
    assert start(alice_api, os.urandom(4 * MiB), path="c.bin").status_code == 201


def test_the_quota_is_checked_again_when_the_upload_completes(alice_api, local_site, object_store):
    local_site.project.storage_quota_bytes = 10 * MiB
    local_site.project.save()
    data = os.urandom(6 * MiB)
    upload = start(alice_api, data, path="checked-at-completion.bin").json()
    send(alice_api, upload, parts_of(data, 5 * MiB))
    local_site.project.storage_quota_bytes = 4 * MiB  # lowered by the site admins meanwhile
    local_site.project.save()
    refused = complete(alice_api, upload)
    assert refused.status_code == 413 and "has 4.0 MiB (4,194,304 bytes) left of its 4.0 MiB" in refused.json()["detail"]
    session = UploadSession.objects.get()
    assert session.state == UploadState.ABORTED and "quota" in session.reason
    assert not StoredFile.objects.exists() and store_uploads(object_store) == []
    with pytest.raises(Exception, match="404|NoSuchKey|Not Found"):
        stored_bytes(object_store, session.key)


# ------------------------------------------------------------------------------------------------- aborting


def test_an_abandoned_upload_is_aborted_by_the_beat_task(alice_api, settings, object_store):
    data = os.urandom(6 * MiB)
    upload = start(alice_api, data).json()
    send(alice_api, upload, {1: data[:5 * MiB]})
    fresh = start(alice_api, os.urandom(6 * MiB), path="fresh.bin").json()
    settings.KAKEHASHI_UPLOAD_ABANDON_HOURS = 24
    UploadSession.objects.filter(pk=upload["id"]).update(last_activity_at=timezone.now() - timedelta(hours=25))
    assert abort_abandoned_uploads_task() == 1
    session = UploadSession.objects.get(pk=upload["id"])
    assert session.state == UploadState.ABORTED and "abandoned" in session.reason
    assert store_uploads(object_store) == [UploadSession.objects.get(pk=fresh["id"]).upload_id]
    gone = alice_api.get(f"{UPLOADS}{upload['id']}/parts/")
    assert gone.status_code == 409 and gone.json()["code"] == "aborted"


@pytest.mark.django_db(transaction=True)
def test_a_live_worker_with_beat_aborts_an_abandoned_upload_on_its_schedule(local_site, object_store):
    import uuid
    from pathlib import Path

    from tests.conftest import start_worker, stop_worker, wait_for

    session, _ = uploads.create_upload(local_site.alice, local_site.project, path="left-behind.bin", size=6 * MiB)
    assert session.upload_id in store_uploads(object_store)
    queue = f"uploads-{uuid.uuid4().hex[:6]}"
    worker = start_worker("uploads", queue, Path(django_settings.VAR_DIR) / f"{queue}.log",
                          KAKEHASHI_UPLOAD_SWEEP_INTERVAL="1", KAKEHASHI_UPLOAD_ABANDON_HOURS="0")
    try:
        wait_for(lambda: UploadSession.objects.get(pk=session.pk).state == UploadState.ABORTED, timeout=60,
                 message="the beat task to abort the upload")
    finally:
        stop_worker(worker)
    assert session.upload_id not in store_uploads(object_store)


def test_the_sweep_also_aborts_multipart_uploads_no_upload_knows(object_store, local_site):
    client = object_store.client()
    orphan = client.create_multipart_upload(Bucket=django_settings.KAKEHASHI_S3_BUCKET, Key="projects/vision/lost.bin")
    assert orphan["UploadId"] in store_uploads(object_store)
    assert uploads.abort_abandoned_uploads(now=timezone.now() + timedelta(hours=25)) == 1
    assert orphan["UploadId"] not in store_uploads(object_store)


def test_the_uploader_can_abort_an_upload(alice_api, object_store):
    upload = start(alice_api, os.urandom(6 * MiB)).json()
    aborted = alice_api.client.delete(f"{UPLOADS}{upload['id']}/", headers={"Authorization": f"Bearer {alice_api.token}"})
    assert aborted.status_code == 200 and aborted.json()["state"] == "aborted"
    assert store_uploads(object_store) == [] and complete(alice_api, upload).status_code == 409


# ---------------------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "path",
    ["../escape.txt", "data/../../etc/passwd", "/etc/passwd", "a//b", "./x", "a\\b", "a\nb", "a\x00b", "tab\there",
     "x" * 600, "a/" + "b" * 300, "$(reboot)", "-rf", "C:/windows", "a`b`", "日本語/" + "データ" * 80,
     "/".join(["あ" * 85] * 5)],  # each name fits, but as a key it is 1,295 bytes: more than S3's 1,024
)
def test_unsafe_paths_are_refused_before_anything_is_created(alice_api, path, object_store):
    response = alice_api.post(UPLOADS, {"path": path, "size": 10, "sha256": "0" * 64})
    assert response.status_code == 400, (path, response.content)
    assert response.json()["field"] == "path" and response.json()["detail"]
    assert not UploadSession.objects.exists() and store_uploads(object_store) == []


@pytest.mark.parametrize("body, field", [
    ({"path": "x", "size": -1, "sha256": "0" * 64}, "size"),
    ({"path": "x", "size": "big", "sha256": "0" * 64}, "size"),
    ({"path": "x", "size": 10, "sha256": "not-a-digest"}, "sha256"),
    ({"path": "x", "size": 10, "sha256": "g" * 64}, "sha256"),
])
def test_malformed_uploads_are_refused(alice_api, body, field):
    response = alice_api.post(UPLOADS, body)
    assert response.status_code == 400 and response.json()["field"] == field


def test_part_numbers_and_checksums_are_checked_when_signing(alice_api):
    upload = start(alice_api, os.urandom(6 * MiB)).json()
    url = f"{UPLOADS}{upload['id']}/parts/"
    beyond = alice_api.post(url, {"parts": [{"number": 3, "sha256": sha_b64(b"x")}]})
    assert beyond.status_code == 400 and "from 1 to 2" in beyond.json()["detail"]
    bad_sum = alice_api.post(url, {"parts": [{"number": 1, "sha256": "abc"}]})
    assert bad_sum.status_code == 400 and "base64" in bad_sum.json()["detail"]


def test_an_existing_file_is_replaced_only_with_overwrite_and_keeps_its_bytes_until_then(alice_api, object_store):
    old, new = b"version 1", b"version 2, longer"
    upload = start(alice_api, old, path="model.pt").json()
    send(alice_api, upload, {1: old})
    complete(alice_api, upload)
    refused = start(alice_api, new, path="model.pt")
    assert refused.status_code == 409 and refused.json()["code"] == "exists"
    replacing = start(alice_api, new, path="model.pt", overwrite=True).json()
    send(alice_api, replacing, {1: new})
    old_key = StoredFile.objects.get().storage_name
    assert stored_bytes(object_store, old_key) == old  # still readable while the new one uploads
    assert complete(alice_api, replacing).status_code == 201
    row = StoredFile.objects.get()
    assert row.size == len(new) and row.storage_name != old_key and stored_bytes(object_store, row.storage_name) == new


def test_other_projects_uploads_are_not_found(alice_api, mallory_api, local_site, api_as, object_store):
    data = os.urandom(100)
    upload = start(alice_api, data).json()
    base = f"{UPLOADS}{upload['id']}/"
    for response in (mallory_api.get(base), mallory_api.get(base + "parts/"), mallory_api.post(base + "complete/"),
                     sign(mallory_api, upload, {1: data}), start(mallory_api, data)):
        assert response.status_code == 404, response.content
    # Nor through mallory's own project's URL.
    assert mallory_api.get(f"/api/v1/projects/nlp/uploads/{upload['id']}/").status_code == 404
    # An upload belongs to whoever started it, even within the project.
    colleague = local_site.mallory.__class__.objects.create_user("carol", password="x")
    Membership.objects.create(user=colleague, project=local_site.project, role=Role.MEMBER)
    assert api_as(colleague, "read", "submit").post(base + "complete/").status_code == 404
    assert UploadSession.objects.get().state == UploadState.OPEN


def test_viewers_and_read_only_tokens_cannot_upload(alice_api, local_site, make_user, api_as):
    viewer = make_user("victor")
    Membership.objects.create(user=viewer, project=local_site.project, role=Role.VIEWER)
    refused = start(api_as(viewer, "read", "submit"), b"x")
    assert refused.status_code == 403 and "role does not allow" in refused.json()["detail"]
    assert start(api_as(local_site.alice, "read"), b"x").status_code == 403
    assert not UploadSession.objects.exists()


def test_uploading_through_the_portal_is_refused_when_there_is_an_object_store(alice_api):
    from django.core.files.uploadedfile import SimpleUploadedFile

    response = alice_api.upload("/api/v1/projects/vision/files/", {"file": SimpleUploadedFile("a.txt", b"a")})
    assert response.status_code == 409 and response.json()["code"] == "use_direct_upload"
    assert "/api/v1/projects/vision/uploads/" in response.json()["detail"]


def test_without_an_object_store_direct_uploads_say_how_to_upload(alice_api, settings):
    settings.KAKEHASHI_S3_BUCKET = ""
    response = start(alice_api, b"abc")
    assert response.status_code == 409 and response.json()["code"] == "no_object_store"


def test_the_upload_endpoints_are_in_the_openapi_schema(client):
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    paths = schema["paths"]
    assert {"post"} <= set(paths["/api/v1/projects/{slug}/uploads/"])
    assert {"get", "post"} <= set(paths["/api/v1/projects/{slug}/uploads/{upload_id}/parts/"])
    assert {"post"} <= set(paths["/api/v1/projects/{slug}/uploads/{upload_id}/complete/"])
    assert {"get", "delete"} <= set(paths["/api/v1/projects/{slug}/uploads/{upload_id}/"])
