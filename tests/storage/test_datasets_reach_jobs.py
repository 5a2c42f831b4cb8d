"""Datasets attached to jobs: uploaded to the object store (a real SeaweedFS), staged by the dispatch worker onto
the real test clusters over SFTP, read by the job at $KAKEHASHI_DATA/<name>; outputs streamed back to the store."""

from __future__ import annotations

import base64
import hashlib
import os
import uuid

import pytest
import requests
from django.conf import settings as django_settings

from portal.catalog.models import HardwareType
from portal.clusters.connect import account_for, backend_for
from portal.clusters.models import Allocation
from portal.jobs.actions.dispatch import dispatch_job
from portal.jobs.actions.submit import submit_job
from portal.jobs.actions.sweeps import submit_sweep
from portal.jobs.actions.validation import JobRequest, SubmitError
from portal.jobs.models import Job, JobState
from portal.storage import datasets, uploads
from portal.storage.errors import StorageError
from portal.storage.models import DatasetState
from tests.conftest import ended_job, job_output, wait_for
from tests.jobs.outputs_checks import AWKWARD_OUTPUTS, check_awkward_outputs

pytestmark = [pytest.mark.cluster]
MiB = 1024 * 1024


def upload(user, project, path: str, data: bytes):
    """What `kakehashi upload` and the Data page do: a multipart upload straight to the store, then complete."""
    session, _ = uploads.create_upload(user, project, path=path, size=len(data), sha256=hashlib.sha256(data).hexdigest())
    size = session.part_size
    parts = {i // size + 1: data[i:i + size] for i in range(0, len(data), size)}
    signed = uploads.sign_parts(user, session, [
        {"number": n, "sha256": base64.b64encode(hashlib.sha256(chunk).digest()).decode()} for n, chunk in parts.items()])
    etags = {}
    for part in signed:
        put = requests.put(part["url"], data=parts[part["number"]], headers=part["headers"], timeout=60)
        assert put.status_code == 200, put.text
        etags[part["number"]] = put.headers["ETag"]
    return uploads.complete_upload(user, session, etags=etags)


def train_and_corpora(user, project, blob: bytes):
    """The datasets the data tests attach: `train` (one file, `blob`) and `corpora` (a folder holding it and
    labels/a.txt); returns train's stored file."""
    stored = upload(user, project, "corpora/train.bin", blob)
    upload(user, project, "corpora/labels/a.txt", b"cat\n")
    datasets.create_dataset(user, project, name="train", path="corpora/train.bin")
    datasets.create_dataset(user, project, name="corpora", prefix="corpora")
    return stored


@pytest.fixture
def data_site(hpc_site):
    """hpc_site with a data cache of this test's own on each cluster (so "already staged" is about this test)."""
    run = uuid.uuid4().hex[:8]
    for cluster in hpc_site.clusters.values():
        cluster.options = {**cluster.options, "data_cache": f"kakehashi-tests/datasets-{run}/cache"}
        cluster.save()
    hpc_site.run = run
    return hpc_site


def _submit(site, hardware: str, script: str, names: list[str], name: str = "reads-data") -> Job:
    return submit_job(site.alice, JobRequest(
        project=site.project, name=name, script=script, hardware=HardwareType.objects.get(slug=hardware),
        walltime="00:10:00", datasets=names)).job


def _staging_note(job: Job) -> str:
    return next(e.reason for e in job.events.all() if e.reason.startswith("staged dataset"))


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("hardware", ["slurm-a100x1", "tsubame-s-gpu"])
def test_an_uploaded_dataset_is_read_by_the_job_with_its_checksum_and_a_second_job_copies_nothing(
        data_site, live_worker, hardware):
    site = data_site
    blob = os.urandom(12 * MiB + 5)  # several parts in the store, several chunks over SFTP
    stored = train_and_corpora(site.alice, site.project, blob)
    script = ('sha256sum "$KAKEHASHI_DATA/train" "$KAKEHASHI_DATA/corpora/labels/a.txt"\n'
              'test -L "$KAKEHASHI_DATA/train" && echo "train is a link into the cache"\n')

    first = _submit(site, hardware, script, ["train", "corpora"])
    assert "export KAKEHASHI_DATA=" in first.rendered_script and "# datasets, each at $KAKEHASHI_DATA/<name>: corpora train" in first.rendered_script
    first = wait_for(lambda: ended_job(first.pk), timeout=120, message="the first job")
    assert first.state == JobState.COMPLETED, first.state_reason
    out = job_output(first, "stdout")
    assert f"{hashlib.sha256(blob).hexdigest()}  " in out and stored.sha256 == hashlib.sha256(blob).hexdigest()
    assert hashlib.sha256(b"cat\n").hexdigest() in out and "train is a link into the cache" in out
    # The train file once for "train" and once inside "corpora": one copy, the same content.
    assert _staging_note(first).startswith(f"staged dataset(s) corpora, train: copied 2 file(s), {len(blob) + 4} bytes")

    second = _submit(site, hardware, script, ["train", "corpora"], name="again")
    second = wait_for(lambda: ended_job(second.pk), timeout=120, message="the second job")
    assert second.state == JobState.COMPLETED, second.state_reason
    assert hashlib.sha256(blob).hexdigest() in job_output(second, "stdout")
    assert "copied 0 file(s), 0 bytes; 2 file(s)" in _staging_note(second)


@pytest.mark.django_db
def test_a_dispatch_retried_after_staging_copies_nothing_twice_and_bytes_that_do_not_match_fail_the_job(data_site):
    site = data_site
    data = os.urandom(MiB)
    upload(site.alice, site.project, "d/one.bin", data)
    datasets.create_dataset(site.alice, site.project, name="one", path="d/one.bin")
    job = _submit(site, "slurm-a100x1", "cat \"$KAKEHASHI_DATA/one\" > /dev/null", ["one"])
    assert dispatch_job(job.pk).status == "submitted"
    # The reply was lost: the retry finds the job (and stages nothing again).
    Job.objects.filter(pk=job.pk).update(state=JobState.SUBMITTING, scheduler_id="", dispatch_lease_until=None)
    assert dispatch_job(job.pk).status == "found"
    assert len([e for e in job.events.all() if e.reason.startswith("staged dataset")]) == 1
    backend_for(job.cluster, account_for(job.cluster, site.alice, site.project)).cancel(
        Job.objects.get(pk=job.pk).scheduler_id)

    # The store's copy of a file is not what its checksum says (an uploader's claim for a multipart file): the
    # job fails before anything is queued, with the reason.
    liar = upload(site.alice, site.project, "d/liar.bin", b"real bytes")
    type(liar).objects.filter(pk=liar.pk).update(sha256=hashlib.sha256(b"claimed bytes").hexdigest())
    datasets.create_dataset(site.alice, site.project, name="liar", path="d/liar.bin")
    bad = _submit(site, "slurm-a100x1", "true", ["liar"], name="never-queued")
    assert dispatch_job(bad.pk).status == "refused"
    bad.refresh_from_db()
    assert bad.state == JobState.FAILED and bad.scheduler_id == ""
    assert "does not match its checksum" in bad.state_reason


@pytest.mark.django_db
def test_a_dispatch_whose_data_stalls_keeps_its_lease_and_with_data_pull_a_lying_object_fails_before_it_is_queued(
        data_site, monkeypatch):
    import time

    import backends.staging_copy
    import backends.transport
    from backends.base import State
    from portal.jobs import transitions
    from portal.storage import objectstore
    from tests.backends.conftest import wait_state

    site = data_site
    monkeypatch.setattr(backends.transport, "HEARTBEAT_EVERY", 0.1)
    monkeypatch.setattr(backends.staging_copy, "LARGE_FILE", 512 * 1024)  # the file travels alone, by its GET
    renewals = []
    update = transitions.update

    def recorded(jobs, **fields):
        if "dispatch_lease_until" in fields:
            renewals.append(fields["dispatch_lease_until"])
        return update(jobs, **fields)

    monkeypatch.setattr(transitions, "update", recorded)
    body = backends.staging_copy.HTTPBody

    class Slow(body):
        """The store answers, then sends nothing for 2 s (a busy store, a slow network)."""

        def splice_into(self, fd, moved):
            time.sleep(2)
            return super().splice_into(fd, moved)

    monkeypatch.setattr(backends.staging_copy, "HTTPBody", Slow)
    upload(site.alice, site.project, "d/slow.bin", os.urandom(MiB))
    datasets.create_dataset(site.alice, site.project, name="slow", path="d/slow.bin")
    job = _submit(site, "slurm-a100x1", "true", ["slow"])
    assert dispatch_job(job.pk).status == "submitted"
    assert len(renewals) >= 10 and renewals == sorted(renewals)  # renewed all along the stall, each later
    job.refresh_from_db()
    backend_for(job.cluster, account_for(job.cluster, site.alice, site.project)).cancel(job.scheduler_id)

    # The login node fetches the objects itself: the worker relays nothing, and a stored copy that is not what its
    # checksum says fails the job before anything is queued, as when the worker relays it.
    cluster = job.cluster
    cluster.options = {**cluster.options, "data_pull": "presigned"}
    cluster.save()
    def relayed(*args, **kwargs):
        pytest.fail("the worker relayed an object")

    monkeypatch.setattr(objectstore, "open_stream", relayed)
    monkeypatch.setattr(backends.staging_copy, "HTTPBody", relayed)
    good = upload(site.alice, site.project, "d/pulled.bin", os.urandom(MiB + 3))
    datasets.create_dataset(site.alice, site.project, name="pulled", path="d/pulled.bin")
    pulled = _submit(site, "slurm-a100x1", 'sha256sum "$KAKEHASHI_DATA/pulled"', ["pulled"], name="pulled")
    assert dispatch_job(pulled.pk).status == "submitted"
    assert "fetched by the login node from the object store itself" in _staging_note(pulled)
    pulled.refresh_from_db()
    backend = backend_for(cluster, account_for(cluster, site.alice, site.project))
    assert wait_state(backend, pulled.scheduler_id, lambda s: s.state.is_final).state == State.COMPLETED
    assert good.sha256 in backend.read_output(pulled.remote_dir, "stdout").decode()

    liar = upload(site.alice, site.project, "d/pulled-liar.bin", b"real bytes")
    type(liar).objects.filter(pk=liar.pk).update(sha256=hashlib.sha256(b"claimed bytes").hexdigest())
    datasets.create_dataset(site.alice, site.project, name="pliar", path="d/pulled-liar.bin")
    bad = _submit(site, "slurm-a100x1", "true", ["pliar"], name="never-queued")
    assert dispatch_job(bad.pk).status == "refused"
    bad.refresh_from_db()
    assert bad.state == JobState.FAILED and bad.scheduler_id == ""
    assert "does not match its checksum" in bad.state_reason


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_a_project_admin_registers_a_group_disk_path_that_a_job_uses_in_place(data_site, live_worker, client):
    site = data_site
    cluster = site.clusters["sge-tsubame-test"]
    backend = backend_for(cluster, account_for(cluster, site.alice, site.project))
    root = f"/home/alice/kakehashi-tests/datasets-{site.run}/gdisk"
    assert backend.transport.run_shell(
        f"mkdir -p {root}/imagenet && printf 'val\\n' > {root}/imagenet/1.txt && ln -s /etc {root}/escape").ok
    Allocation.objects.filter(project=site.project, cluster=cluster).update(data_root=root)

    good = datasets.create_dataset(site.alice, site.project, name="imagenet", cluster=cluster,
                                   cluster_path=f"{root}/imagenet")
    escape = datasets.create_dataset(site.alice, site.project, name="escape", cluster=cluster,
                                     cluster_path=f"{root}/escape")
    good = wait_for(lambda: type(good).objects.filter(pk=good.pk, state=DatasetState.READY).first(), message="check")
    escape = wait_for(lambda: type(escape).objects.filter(pk=escape.pk, state=DatasetState.REFUSED).first(),
                      message="the refusal")
    assert "outside the project's root" in escape.reason
    with pytest.raises(SubmitError, match="dataset escape is not ready"):
        _submit(site, "tsubame-s-gpu", "true", ["escape"])
    with pytest.raises(SubmitError, match="cannot be given to a job on Slurm"):
        _submit(site, "slurm-a100x1", "true", ["imagenet"])

    job = _submit(site, "tsubame-s-gpu", 'cat "$KAKEHASHI_DATA/imagenet/1.txt"; readlink "$KAKEHASHI_DATA/imagenet"',
                  ["imagenet"])
    job = wait_for(lambda: ended_job(job.pk), timeout=120, message="the job")
    assert job.state == JobState.COMPLETED, job.state_reason
    lines = job_output(job, "stdout").splitlines()
    assert "val" in lines and f"{root}/imagenet" in lines
    assert "copied 0 file(s), 0 bytes" in _staging_note(job) and "1 registered path(s) used in place" in _staging_note(job)


@pytest.mark.django_db
def test_bad_dataset_names_paths_and_other_projects_datasets_are_refused_and_nothing_is_recorded(data_site):
    site = data_site
    upload(site.alice, site.project, "x/f.txt", b"f")
    cluster = site.clusters["slurm-test"]
    Allocation.objects.filter(project=site.project, cluster=cluster).update(data_root="/home/alice/gdisk")
    refusals = [
        ({"name": "../up", "path": "x/f.txt"}, "not a valid dataset name"),
        ({"name": "a b", "path": "x/f.txt"}, "not a valid dataset name"),
        ({"name": "ok\n", "path": "x/f.txt"}, "not a valid dataset name"),
        ({"name": "ok", "path": "../x/f.txt"}, "'..' part"),
        ({"name": "ok", "path": "/etc/passwd"}, "is absolute"),
        ({"name": "ok", "path": "x/missing"}, "has no file x/missing"),
        ({"name": "ok", "prefix": "nothing"}, "has no file under nothing/"),
        ({"name": "ok", "cluster": cluster, "cluster_path": "/home/alice/gdisk/../.ssh"}, "'..' part"),
        ({"name": "ok", "cluster": cluster, "cluster_path": "/home/alice/other"}, "outside the project's storage"),
        ({"name": "ok", "cluster": cluster, "cluster_path": "relative/path"}, "not absolute"),
        ({"name": "ok", "cluster": cluster, "cluster_path": "/home/alice/gdisk/a\nb"}, "control characters"),
    ]
    for kwargs, words in refusals:
        with pytest.raises(StorageError, match=words):
            datasets.create_dataset(site.alice, site.project, **kwargs)
    assert not site.project.datasets.exists()

    # A member who is not an admin names files, but may not lend the project's cluster storage.
    from django.core.exceptions import PermissionDenied

    with pytest.raises(PermissionDenied):
        datasets.create_dataset(site.bob, site.project, name="gd", cluster=cluster, cluster_path="/home/alice/gdisk/d")
    datasets.create_dataset(site.bob, site.project, name="f", path="x/f.txt")

    # Another project's dataset reads as one that does not exist.
    from portal.projects.models import Membership, Role

    Membership.objects.create(user=site.alice, project=site.other, role=Role.MEMBER)
    upload(site.alice, site.other, "theirs.txt", b"t")
    datasets.create_dataset(site.alice, site.other, name="theirs", path="theirs.txt")
    with pytest.raises(SubmitError, match="project vision has no dataset named 'theirs'"):
        _submit(site, "slurm-a100x1", "true", ["theirs"])
    with pytest.raises(SubmitError, match="attached twice"):
        _submit(site, "slurm-a100x1", "true", ["f", "f"])
    assert not Job.objects.exists()
    assert django_settings.KAKEHASHI_S3_BUCKET  # all of the above against the object store


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_large_outputs_come_back_to_the_object_store_whole_and_download_through_a_presigned_url(
        data_site, live_worker, client):
    from portal.api.tokens import issue_token

    _, token = issue_token(data_site.alice, name="outputs", scopes=["read"])
    auth = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    job = _submit(data_site, "slurm-a100x1",
                  'mkdir -p "$KAKEHASHI_OUTPUT_DIR/run 1"\n'
                  'head -c 250M /dev/urandom | tee "$KAKEHASHI_OUTPUT_DIR/model.bin" | sha256sum\n'
                  'echo done > "$KAKEHASHI_OUTPUT_DIR/run 1/log.txt"\n', [], name="big-outputs")
    job = wait_for(lambda: ended_job(job.pk), timeout=180, message="the job")
    assert job.state == JobState.COMPLETED, job.state_reason
    written = job_output(job, "stdout").split("== start", 1)[1].splitlines()[1].split()[0]
    model = wait_for(lambda: job.artifacts.filter(path="model.bin").exclude(stored_name="").first(), timeout=120,
                     message="the outputs in the object store")
    assert model.size == 250 * MiB and model.stored_name == f"jobs/{job.uuid}/outputs/model.bin"
    body = client.get(f"/api/v1/jobs/{job.pk}/", **auth).json()
    [listed] = [o for o in body["outputs"] if o["path"] == "model.bin"]
    redirect = client.get(listed["url"], **auth)
    assert redirect.status_code == 302
    digest, size = hashlib.sha256(), 0
    with requests.get(redirect["Location"], stream=True, timeout=120) as got:
        assert got.status_code == 200
        for chunk in got.iter_content(4 * MiB):
            digest.update(chunk)
            size += len(chunk)
    assert (size, digest.hexdigest()) == (250 * MiB, written)


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_outputs_named_with_spaces_or_in_japanese_come_back_from_slurm_and_a_newline_or_a_link_is_said_not_collected(
        data_site, live_worker, client):
    job = _submit(data_site, "slurm-a100x1", AWKWARD_OUTPUTS, [], name="awkward-names")
    job = wait_for(lambda: ended_job(job.pk), timeout=180, message="the job")
    assert job.state == JobState.COMPLETED, job.state_reason
    check_awkward_outputs(client, job)


@pytest.mark.django_db
def test_every_element_of_a_sweep_array_reads_the_dataset_staged_once_for_the_array(data_site):
    site = data_site
    blob = os.urandom(MiB + 3)
    upload(site.alice, site.project, "sweep/data.bin", blob)
    datasets.create_dataset(site.alice, site.project, name="shared", path="sweep/data.bin")
    sweep = submit_sweep(site.alice, JobRequest(
        project=site.project, name="swept", script='sha256sum "$KAKEHASHI_DATA/shared"; echo "lr=$LR"',
        hardware=HardwareType.objects.get(slug="slurm-a100x1"), walltime="00:05:00", datasets=["shared"]),
        {"LR": ["0.1", "0.01"]}, array=True)
    jobs = sweep.jobs
    assert all([d.name for d in job.datasets.all()] == ["shared"] for job in jobs)
    assert dispatch_job(jobs[0].pk).status == "submitted"
    notes = [e.reason for job in jobs for e in job.events.all() if e.reason.startswith("staged")]
    assert len(notes) == 2 and all(f"copied 1 file(s), {len(blob)} bytes" in n for n in notes)  # once, for both
    from tests.backends.conftest import wait_state

    backend = backend_for(jobs[0].cluster, account_for(jobs[0].cluster, site.alice, site.project))
    for job in jobs:
        job.refresh_from_db()
        wait_state(backend, job.scheduler_id, lambda s: s.state.is_final)
        out = backend.read_output(job.remote_dir, "stdout").decode()
        assert hashlib.sha256(blob).hexdigest() in out and f"lr={job.parameters['LR']}" in out


@pytest.mark.django_db
@pytest.mark.parametrize("hardware", ["slurm-a100x1", "tsubame-s-gpu"])
def test_a_dataset_alices_job_staged_is_not_copied_again_for_bobs_job_in_the_projects_shared_cache(
        data_site, hardware, monkeypatch):
    from backends.base import State
    from backends.transport import SSHTransport
    from tests.backends.conftest import wait_state
    from tests.conftest import CLUSTER_DIR

    site = data_site
    for cluster in site.clusters.values():  # as a site sets /gs/bs/{group}/.kakehashi/cache; the project's is kkdemo
        cluster.options = {**cluster.options,
                           "data_cache": f"{CLUSTER_DIR}/groups/{{group}}/kakehashi-tests/datasets-{site.run}/cache"}
        cluster.save()
    puts = []
    pipe = SSHTransport.pipe

    def counted(self, command, source, **kwargs):
        if kwargs.get("counted", True):  # a stream of data, not one of links
            puts.append((self.username, command))
        return pipe(self, command, source, **kwargs)

    monkeypatch.setattr(SSHTransport, "pipe", counted)
    blob = os.urandom(3 * MiB + 1)
    upload(site.alice, site.project, "shared/weights.bin", blob)
    datasets.create_dataset(site.alice, site.project, name="weights", path="shared/weights.bin")
    script = 'sha256sum "$KAKEHASHI_DATA/weights"; id -un'

    outputs = {}
    for user in (site.alice, site.bob):
        job = submit_job(user, JobRequest(
            project=site.project, name=f"reads-{user.username}", script=script,
            hardware=HardwareType.objects.get(slug=hardware), walltime="00:10:00", datasets=["weights"])).job
        assert dispatch_job(job.pk).status == "submitted"
        job.refresh_from_db()
        backend = backend_for(job.cluster, account_for(job.cluster, user, site.project))
        assert wait_state(backend, job.scheduler_id, lambda s: s.state.is_final).state == State.COMPLETED
        outputs[user.username] = (backend.read_output(job.remote_dir, "stdout").decode(), _staging_note(job))

    digest = hashlib.sha256(blob).hexdigest()
    alice_out, alice_note = outputs["alice"]
    bob_out, bob_note = outputs["bob"]
    assert [user for user, _ in puts] == ["alice"]  # one stream of data, alice's: none for bob
    assert f"copied 1 file(s), {len(blob)} bytes" in alice_note and "the cache shared by group kkdemo" in alice_note
    assert "copied 0 file(s), 0 bytes; 1 file(s)" in bob_note and "the cache shared by group kkdemo" in bob_note
    assert f"{digest}  " in alice_out and "\nalice" in alice_out
    assert f"{digest}  " in bob_out and "\nbob" in bob_out
