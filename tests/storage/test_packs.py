"""A folder of many small files is also kept as packs, a few tar objects in the store (portal/storage/packs.py,
docs/decisions/0062): a job's first staging reads the packs' ranges, not one object per file, and every file is
still checked by its SHA-256 on the cluster. Against the real SeaweedFS, Celery worker and test cluster."""

from __future__ import annotations

import hashlib
import os
import uuid

import pytest
from django.conf import settings as django_settings

from portal.catalog.models import HardwareType
from portal.jobs.actions.submit import submit_job
from portal.jobs.actions.validation import JobRequest
from portal.jobs.models import JobState
from portal.storage import datasets, manage, packs
from portal.storage.models import Pack, PackMember, PackState, StoredFile
from tests.conftest import ended_job, job_output, wait_for
from tests.storage.test_batch_uploads import BATCH, entry, put_all

pytestmark = [pytest.mark.cluster]


def _upload_folder(api, contents: dict[str, bytes]) -> None:
    """What `kakehashi upload FOLDER` does: one request signs the batch, the PUTs go to the store, one completes."""
    uploads = api.post(BATCH, {"files": [entry(p, d) for p, d in contents.items()]}).json()["uploads"]
    put_all(uploads, contents)
    done = api.post(BATCH + "complete/", {"ids": [u["id"] for u in uploads]})
    assert done.status_code == 200 and done.json()["missing"] == [], done.content


def _object_exists(object_store, key: str) -> bool:
    try:
        object_store.client().head_object(Bucket=django_settings.KAKEHASHI_S3_BUCKET, Key=key)
        return True
    except Exception:  # noqa: BLE001 - botocore's 404
        return False


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_a_folder_uploaded_in_a_batch_is_packed_by_the_worker_and_its_first_staging_reads_the_pack(
        hpc_site, alice_api, live_worker, object_store):
    site = hpc_site
    for cluster in site.clusters.values():  # a cache of this test's own: "copied" is about this test only
        cluster.options = {**cluster.options, "data_cache": f"kakehashi-tests/packs-{uuid.uuid4().hex[:8]}/cache"}
        cluster.save()
    contents = {f"imagenet/n{i % 3}/img_{i:04d}.JPEG": os.urandom(2000 + 13 * i) for i in range(150)}
    _upload_folder(alice_api, contents)
    pack = wait_for(lambda: Pack.objects.filter(project=site.project, state=PackState.READY).first(), timeout=60,
                    message="the worker to pack the uploaded folder")
    assert pack.files == 150 and _object_exists(object_store, pack.storage_name)
    datasets.create_dataset(site.alice, site.project, name="imgs", prefix="imagenet")

    script = 'cd "$KAKEHASHI_DATA/imgs" && sha256sum n1/img_0007.JPEG && find . -type l | wc -l'
    job = submit_job(site.alice, JobRequest(project=site.project, name="reads-packed", script=script,
                                            hardware=HardwareType.objects.get(slug="slurm-a100x1"),
                                            walltime="00:10:00", datasets=["imgs"])).job
    job = wait_for(lambda: ended_job(job.pk), timeout=120, message="the job reading the packed folder")
    assert job.state == JobState.COMPLETED, job.state_reason
    note = next(e.reason for e in job.events.all() if e.reason.startswith("staged dataset"))
    assert note.startswith("staged dataset(s) imgs: copied 150 file(s)")
    assert "150 file(s) read from packs of the object store" in note
    out = job_output(job, "stdout")
    assert f"{hashlib.sha256(contents['imagenet/n1/img_0007.JPEG']).hexdigest()}  n1/img_0007.JPEG" in out
    assert "n1/img_0007.JPEG\n150\n" in out  # every file of the folder is there

    # Deleting a file deletes its packed copy too: the pack holding it goes, object and rows, and the other 149
    # files are packed again.
    manage.delete_file(site.alice, site.project, "imagenet/n1/img_0007.JPEG")
    repacked = wait_for(lambda: Pack.objects.filter(project=site.project, state=PackState.READY)
                        .exclude(pk=pack.pk).first(), timeout=60, message="the folder packed again")
    assert not Pack.objects.filter(pk=pack.pk).exists() and not _object_exists(object_store, pack.storage_name)
    assert repacked.files == 149
    gone = hashlib.sha256(contents["imagenet/n1/img_0007.JPEG"]).hexdigest()
    assert not PackMember.objects.filter(sha256=gone).exists()


@pytest.mark.django_db
def test_each_content_is_packed_once_large_files_and_few_files_are_not_and_a_damaged_object_is_never_read_from_a_pack(
        local_site, alice_api, object_store, settings):
    settings.KAKEHASHI_PACK_MIN_FILES = 5
    project = local_site.project
    same = b"the same bytes at two paths"
    contents = {f"d/{i}.txt": f"file {i}\n".encode() for i in range(6)}
    contents.update({"d/copy-a.txt": same, "d/copy-b.txt": same, "d/big.bin": os.urandom(packs.SMALL)})
    _upload_folder(alice_api, contents)
    # Damage one object in the store behind the portal's back (a disk fault): its row keeps the true SHA-256.
    liar = StoredFile.objects.get(project=project, path="d/3.txt")
    object_store.client().put_object(Bucket=django_settings.KAKEHASHI_S3_BUCKET, Key=liar.storage_name,
                                     Body=b"file 3, changed\n")

    assert packs.pack_project(project.pk) == 6  # 8 contents packable (one twice, one too large), one damaged
    pack = Pack.objects.get(project=project)
    assert (pack.state, pack.files) == (PackState.READY, 7)
    members = {m.sha256: m for m in pack.members.all()}
    assert hashlib.sha256(same).hexdigest() in members and len(members) == 7
    assert hashlib.sha256(contents["d/big.bin"]).hexdigest() not in members
    assert members[liar.sha256].intact is False
    # Staging is told where each intact member is, and nothing for the damaged one or the large one.
    places = packs.places(project, StoredFile.objects.filter(project=project))
    assert liar.sha256 not in places and hashlib.sha256(contents["d/big.bin"]).hexdigest() not in places
    assert sorted(places) == sorted(sha for sha, m in members.items() if m.intact)
    body = object_store.client().get_object(Bucket=django_settings.KAKEHASHI_S3_BUCKET, Key=pack.storage_name)["Body"]
    data = body.read()
    five = places[hashlib.sha256(b"file 5\n").hexdigest()]
    assert data[five.offset + 512:five.offset + 512 + 7] == b"file 5\n"  # after its 512-byte header

    # Nothing new to pack: no second pack; a small folder (under KAKEHASHI_PACK_MIN_FILES) is never packed.
    assert packs.pack_project(project.pk) == 0 and Pack.objects.count() == 1
    _upload_folder(alice_api, {"e/one.txt": b"1", "e/two.txt": b"2"})
    assert packs.pack_project(project.pk) == 0 and Pack.objects.count() == 1
