"""The `kakehashi` command against a live portal and the real worker — no patched client anywhere."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import stat
import time
from decimal import Decimal

import pytest
import requests

from portal.catalog.models import HardwareType
from portal.jobs.models import Job
from portal.storage.models import StoredFile, UploadSession

pytestmark = pytest.mark.django_db(transaction=True)


def _config(cli_home) -> dict:
    return json.loads((cli_home / "kh" / "config.json").read_text())


# ------------------------------------------------------------------------------------------------- login


def test_login_checks_the_token_and_saves_it_readable_by_its_owner_only(kh, live_server, alice_token, cli_home):
    result = kh("login", "--url", live_server.url, "--token", alice_token)
    assert result.code == 0, result.err
    assert "as alice" in result.out
    path = cli_home / "kh" / "config.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert _config(cli_home) == {"url": live_server.url, "token": alice_token}


def test_login_reads_the_token_from_stdin_so_it_stays_out_of_the_shell_history(kh, live_server, alice_token, cli_home):
    result = kh("--json", "login", "--url", live_server.url, stdin=alice_token + "\n")
    assert result.code == 0, result.err
    assert result.json()["user"]["username"] == "alice"
    assert _config(cli_home)["token"] == alice_token


def test_a_bad_token_is_refused_clearly_and_not_saved(kh, live_server, local_site, cli_home):
    result = kh("login", "--url", live_server.url, "--token", "kh_" + "B" * 43)
    assert result.code == 3
    assert "unknown API token" in result.err and "401" in result.err
    assert not (cli_home / "kh" / "config.json").exists()
    malformed = kh("budget", "vision", env={"KAKEHASHI_URL": live_server.url, "KAKEHASHI_TOKEN": "oops"})
    assert malformed.code == 3 and "malformed API token" in malformed.err


def test_a_revoked_token_stops_working(logged_in, local_site):
    from portal.api.models import ApiToken

    ApiToken.objects.update(revoked_at="2026-01-01T00:00:00Z")
    result = logged_in("status")
    assert result.code == 3 and "revoked" in result.err and "kakehashi login" in result.err


def test_the_environment_can_stand_in_for_login(kh, live_server, alice_token):
    result = kh("--json", "projects", env={"KAKEHASHI_URL": live_server.url, "KAKEHASHI_TOKEN": alice_token})
    assert result.code == 0, result.err
    assert [p["slug"] for p in result.json()] == ["vision"]


def test_without_a_login_it_says_how_to_log_in(kh, local_site):
    result = kh("status")
    assert result.code == 2 and "kakehashi login" in result.err


def test_an_unreachable_portal_is_exit_code_4(kh, alice_token):
    result = kh("status", env={"KAKEHASHI_URL": "http://127.0.0.1:9", "KAKEHASHI_TOKEN": alice_token})
    assert result.code == 4 and "cannot reach http://127.0.0.1:9" in result.err


def test_wrong_usage_is_exit_code_2(kh):
    assert kh("submit").code == 2
    assert kh("frobnicate").code == 2
    not_http = kh("login", "--url", "file:///etc/passwd", "--token", "kh_" + "A" * 43)
    assert not_http.code == 2 and "not an http:// or https:// address" in not_http.err


# ------------------------------------------------------------------------------------------------ submit


def test_dry_run_prints_the_script_and_the_estimate_and_submits_nothing(logged_in, tmp_path):
    script = tmp_path / "train.sh"
    script.write_text("echo training\n")
    result = logged_in("submit", str(script), "--project", "vision", "--hardware", "local-cpu", "--walltime", "1h",
                       "--dry-run")
    assert result.code == 0, result.err
    assert result.out.startswith("#!") and "dry run: nothing was submitted" in result.out
    assert "Estimate: 10.00 points" in result.out and "90.00 after this job" in result.out
    assert Job.objects.count() == 0


@pytest.fixture
def gpu_offers(local_site):
    """Two 8×A100 offers on the local cluster (the local backend ignores GPUs), the cheaper one second."""
    for slug, rate in (("a100-dear", "30"), ("a100-cheap", "5")):
        HardwareType.objects.create(cluster=local_site.cluster, slug=slug, name=slug, gpu_model="a100", gpus_per_node=8,
                                    max_nodes=2, rate=Decimal(rate), rate_unit="points")


def test_gpus_picks_the_cheapest_matching_hardware_and_explains_a_miss(logged_in, gpu_offers, tmp_path):
    script = tmp_path / "train.sh"
    script.write_text("echo training\n")
    result = logged_in("--json", "submit", str(script), "--project", "vision", "--gpus", "a100:8", "--dry-run")
    assert result.code == 0, result.err
    assert result.json()["hardware"] == "a100-cheap" and result.json()["name"] == "train"
    miss = logged_in("submit", str(script), "--project", "vision", "--gpus", "h100:8", "--dry-run")
    assert miss.code == 3
    assert "no hardware of project vision has 8×H100 per node" in miss.err and "a100-cheap" in miss.err
    too_many_nodes = logged_in("submit", str(script), "--project", "vision", "--gpus", "a100:8", "--nodes", "3")
    assert too_many_nodes.code == 3 and "for 3 nodes" in too_many_nodes.err


def test_a_notebook_is_submitted_with_typed_parameters(logged_in, tmp_path):
    from tests.api.conftest import notebook

    path = tmp_path / "sweep.ipynb"
    path.write_text(json.dumps(notebook()))
    result = logged_in("--json", "submit", str(path), "--project", "vision", "--hardware", "local-cpu",
                       "-p", "lr=0.01", "-p", "epochs=3", "-p", "model=resnet", "-p", 'layers=[1, 2]', "--dry-run")
    assert result.code == 0, result.err
    assert result.json()["parameters"] == {"lr": 0.01, "epochs": 3, "model": "resnet", "layers": [1, 2]}
    assert result.json()["kind"] == "notebook"
    broken = tmp_path / "broken.ipynb"
    broken.write_text("{not json")
    refused = logged_in("submit", str(broken), "--project", "vision", "--hardware", "local-cpu")
    assert refused.code == 2 and "not valid JSON" in refused.err


def test_a_sweep_is_a_job_per_combination_and_a_retry_with_its_key_submits_nothing_more(logged_in, tmp_path):
    from portal.jobs.models import JobGroup

    script = tmp_path / "train.sh"
    script.write_text('echo "lr=$LR batch=$BATCH"\n')
    args = ("submit", str(script), "--project", "vision", "--hardware", "local-cpu", "--walltime", "10m",
            "--sweep", "LR=0.1,0.01", "--sweep", "BATCH=32,64")
    dry = logged_in(*args, "--dry-run")
    assert dry.code == 0, dry.err
    assert "4 jobs, job by job" in dry.out and "estimate for all: 6.67 points" in dry.out
    assert Job.objects.count() == 0
    result = logged_in(*args, "--idempotency-key", "lr-grid-1")
    assert result.code == 0, result.err
    group = JobGroup.objects.get()
    assert f"Submitted sweep {group.pk} (train): 4 jobs job by job" in result.out
    assert '{"BATCH": 64, "LR": 0.01}' in result.out
    again = logged_in(*args, "--idempotency-key", "lr-grid-1")
    assert again.code == 0 and "Already submitted" in again.out and Job.objects.count() == 4
    assert logged_in(*args, "--array").code == 3  # the local backend has no arrays: the portal says so
    empty = logged_in("submit", str(script), "--project", "vision", "--hardware", "local-cpu", "--sweep", "LR=")
    assert empty.code == 2 and "needs values" in empty.err


def test_a_sweep_larger_than_a_page_of_the_answer_is_printed_whole(logged_in, tmp_path, monkeypatch):
    from portal.api import queries as api_queries

    monkeypatch.setattr(api_queries, "SWEEP_PAGE", 2)  # the portal answers two jobs a page; the sweep has five
    script = tmp_path / "seed.sh"
    script.write_text('echo "$SEED"\n')
    args = ("submit", str(script), "--project", "vision", "--hardware", "local-cpu", "--walltime", "10m",
            "--sweep", "SEED=1,2,3,4,5")
    result = logged_in(*args)
    assert result.code == 0, result.err
    assert "5 jobs job by job" in result.out
    assert all(f'{{"SEED": {seed}}}' in result.out for seed in range(1, 6)), result.out
    answer = logged_in("--json", *args).json()
    assert [job["parameters"] for job in answer["jobs"]] == [{"SEED": seed} for seed in range(1, 6)]
    assert answer["jobs_count"] == 5 and answer["jobs_next"] is None


def test_refusals_by_the_portal_are_exit_code_3_with_its_message(logged_in, tmp_path):
    script = tmp_path / "x.sh"
    script.write_text("echo x\n")
    base = ["submit", str(script), "--project", "vision", "--hardware", "local-cpu"]
    bad_walltime = logged_in(*base, "--walltime", "abc")
    assert bad_walltime.code == 3 and "[walltime]" in bad_walltime.err and "is not a duration" in bad_walltime.err
    over_budget = logged_in(*base, "--walltime", "11h")  # 110 points of a 100-point budget
    assert over_budget.code == 3 and "402 budget_exceeded" in over_budget.err and "100.00 points left" in over_budget.err
    other_project = logged_in(*base[:2], "--project", "nlp", "--hardware", "local-cpu")
    assert other_project.code == 3 and "404" in other_project.err
    assert Job.objects.count() == 0


@pytest.mark.worker
def test_submit_status_and_follow_the_logs_of_a_real_job(logged_in, tmp_path, live_worker):
    script = tmp_path / "hello.sh"
    script.write_text("echo hello from the cli\nsleep 1\necho second line\necho oops >&2\n")
    result = logged_in("submit", str(script), "--project", "vision", "--hardware", "local-cpu", "--walltime", "10m",
                       "--name", "cli-e2e")
    assert result.code == 0, result.err
    assert result.out.startswith("Submitted job ") and "kakehashi logs" in result.out
    job_id = Job.objects.get(name="cli-e2e").pk

    logs = logged_in("logs", str(job_id), "-f", timeout=120)
    assert logs.code == 0, logs.err
    # Followed to the very end: the job script's own closing line is there.
    assert "hello from the cli\nsecond line\n" in logs.out and logs.out.rstrip().endswith("exit status 0 ==")
    errors = logged_in("logs", str(job_id), "--stream", "stderr", "-f", timeout=60)  # until fetched in full
    assert errors.out.strip() == "oops"

    status = logged_in("--json", "status", str(job_id))
    assert status.json()["state"] == "completed" and status.json()["exit_code"] == 0
    human = logged_in("status", str(job_id))
    assert "completed" in human.out and "cli-e2e" in human.out
    table = logged_in("status")
    assert table.out.splitlines()[0].split()[:3] == ["ID", "STATE", "NAME"]
    assert any(line.split()[:3] == [str(job_id), "completed", "cli-e2e"] for line in table.out.splitlines())
    listed = logged_in("status", "--json", "--state", "completed")
    assert [j["id"] for j in listed.json()] == [job_id]


@pytest.mark.worker
def test_cancel_a_running_job(logged_in, tmp_path, live_worker):
    script = tmp_path / "long.sh"
    script.write_text("echo started\nsleep 120\n")
    submitted = logged_in("--json", "submit", str(script), "--project", "vision", "--hardware", "local-cpu")
    job_id = submitted.json()["id"]
    deadline = time.monotonic() + 90
    while logged_in("--json", "status", str(job_id)).json()["state"] != "running":
        assert time.monotonic() < deadline, "the job never ran"
        time.sleep(0.5)
    result = logged_in("cancel", str(job_id))
    assert result.code == 0, result.err
    assert f"Cancel requested for job {job_id}" in result.out
    deadline = time.monotonic() + 60
    while logged_in("--json", "status", str(job_id)).json()["state"] != "cancelled":
        assert time.monotonic() < deadline, "the job was never cancelled"
        time.sleep(0.5)
    again = logged_in("cancel", str(job_id))
    assert again.code == 3 and "already ended" in again.err


# -------------------------------------------------------------------------------------- upload & budget


def test_upload_puts_a_file_straight_into_the_object_store(logged_in, tmp_path, object_store, settings):
    data = tmp_path / "train.csv"
    data.write_bytes(b"x,y\n" * 1000)
    result = logged_in("upload", str(data), "--project", "vision", "--dest", "datasets/")
    assert result.code == 0, result.err
    assert result.out.startswith("Uploaded datasets/train.csv (3.9 KiB")
    stored = StoredFile.objects.get()
    assert stored.path == "datasets/train.csv" and stored.size == 4000
    assert UploadSession.objects.get().state == "completed"  # direct: created, signed, completed
    body = object_store.client().get_object(Bucket=settings.KAKEHASHI_S3_BUCKET, Key=stored.storage_name)["Body"]
    assert body.read() == data.read_bytes()

    again = logged_in("upload", str(data), "--project", "vision", "--dest", "datasets/")
    assert again.code == 3 and "already exists" in again.err
    replaced = logged_in("--json", "upload", str(data), "--project", "vision", "--dest", "datasets/", "--overwrite")
    assert replaced.code == 0 and replaced.json()["path"] == "datasets/train.csv"
    unsafe = logged_in("upload", str(data), "--project", "vision", "--dest", "../outside.csv")
    assert unsafe.code == 3 and "[path]" in unsafe.err
    elsewhere = logged_in("upload", str(data), "--project", "nlp")
    assert elsewhere.code == 3 and "404" in elsewhere.err
    missing = logged_in("upload", str(tmp_path / "nope.csv"), "--project", "vision")
    assert missing.code == 2
    assert StoredFile.objects.count() == 1


def test_upload_of_a_folder_keeps_its_layout_sends_its_files_in_batches_and_run_again_sends_nothing(
        logged_in, tmp_path, object_store, settings):
    folder = tmp_path / "cifar"
    (folder / "train" / "猫").mkdir(parents=True)
    (folder / "train" / "batch_1.bin").write_bytes(os.urandom(12 * 1024 * 1024))
    (folder / "meta.txt").write_text("labels\n")
    for i in range(30):
        (folder / "train" / "猫" / f"img {i}.jpg").write_bytes(os.urandom(1000 + i))
    (folder / "link-to-etc").symlink_to("/etc/hostname")  # links are skipped, as always
    result = logged_in("upload", str(folder), "--project", "vision", "--dest", "datasets/cifar")
    assert result.code == 0, result.err
    assert result.out.strip() == f"Uploaded 32 file(s) ({(12 * 1024 * 1024 + 7 + sum(1000 + i for i in range(30))) / 1048576:.1f} MiB) to vision."
    paths = set(StoredFile.objects.values_list("path", flat=True))
    assert len(paths) == 32 and "datasets/cifar/meta.txt" in paths and "datasets/cifar/train/猫/img 7.jpg" in paths
    assert not any("link-to-etc" in p for p in paths)
    for row in StoredFile.objects.all():
        local = folder / row.path.removeprefix("datasets/cifar/")
        assert row.state == "ready" and row.sha256 == hashlib.sha256(local.read_bytes()).hexdigest()
        body = object_store.client().get_object(Bucket=settings.KAKEHASHI_S3_BUCKET, Key=row.storage_name)["Body"]
        assert body.read() == local.read_bytes()
    # Every file its own upload, none of them multipart: one PUT each, signed and completed in one batch.
    assert UploadSession.objects.filter(state="completed", upload_id="").count() == 32

    again = logged_in("upload", str(folder), "--project", "vision", "--dest", "datasets/cifar")
    assert again.code == 0 and "Uploaded 0 file(s) (0 B) to vision; 32 already there with the same SHA-256." in again.out
    assert UploadSession.objects.count() == 32
    (folder / "meta.txt").write_text("labels, changed\n")
    changed = logged_in("upload", str(folder), "--project", "vision", "--dest", "datasets/cifar")
    assert changed.code == 3 and "meta.txt already exists" in changed.err and "overwrite" in changed.err
    replaced = logged_in("--json", "upload", str(folder), "--project", "vision", "--dest", "datasets/cifar", "--overwrite")
    assert replaced.code == 0, replaced.err
    assert [f["path"] for f in replaced.json() if f.get("state") != "present"] == ["datasets/cifar/meta.txt"]
    assert StoredFile.objects.get(path="datasets/cifar/meta.txt").size == 16


def test_upload_run_again_after_an_interruption_sends_only_the_missing_parts(logged_in, tmp_path, local_site, settings):
    from portal.storage import uploads

    settings.KAKEHASHI_UPLOAD_PART_BYTES = 5 * 1024 * 1024
    data = tmp_path / "weights.bin"
    content = os.urandom(13 * 1024 * 1024)
    data.write_bytes(content)
    # An earlier run created the upload and sent its first part before the connection dropped.
    session, _ = uploads.create_upload(local_site.alice, local_site.project, path="weights.bin", size=len(content),
                                       sha256=hashlib.sha256(content).hexdigest())
    first = content[:5 * 1024 * 1024]
    [part] = uploads.sign_parts(local_site.alice, session, [
        {"number": 1, "sha256": base64.b64encode(hashlib.sha256(first).digest()).decode()}])
    assert requests.put(part["url"], data=first, headers=part["headers"], timeout=30).status_code == 200

    result = logged_in("upload", str(data), "--project", "vision")
    assert result.code == 0, result.err
    assert result.out.startswith("Resumed and uploaded weights.bin (13.0 MiB")
    assert UploadSession.objects.get().pk == session.pk
    assert StoredFile.objects.get().sha256 == hashlib.sha256(content).hexdigest()


def test_upload_without_an_object_store_goes_through_the_portal(logged_in, tmp_path, filesystem_storage):
    data = tmp_path / "notes.txt"
    data.write_text("hello\n")
    result = logged_in("upload", str(data), "--project", "vision")
    assert result.code == 0, result.err
    assert result.out.startswith("Uploaded notes.txt (6 B") and not UploadSession.objects.exists()
    assert (tmp_path / "media" / "projects/vision/notes.txt").read_text() == "hello\n"


def test_budget(logged_in):
    human = logged_in("budget", "vision")
    assert human.code == 0, human.err
    assert "strict once budget" in human.out and "available:       100.00 points" in human.out
    data = logged_in("budget", "vision", "--json").json()
    assert data["available"] == "100.0000" and data["unit"] == "points"
    assert logged_in("budget", "nlp").code == 3


def test_submit_with_data_gives_the_job_the_dataset_and_outputs_lists_and_downloads_what_it_left(
        logged_in, tmp_path, local_site, live_worker):
    data = tmp_path / "weights.bin"
    data.write_bytes(os.urandom(3 * 1024 * 1024 + 1))
    assert logged_in("upload", str(data), "--project", "vision", "--dest", "models/").code == 0
    bad = logged_in("datasets", "vision", "--add", "../w", "--path", "models/weights.bin")
    assert bad.code == 3 and "[name]" in bad.err and "not a valid dataset name" in bad.err
    made = logged_in("datasets", "vision", "--add", "weights", "--path", "models/weights.bin")
    assert made.code == 0, made.err
    assert made.out.startswith("Dataset weights in vision: models/weights.bin.")
    listed = logged_in("datasets", "vision")
    assert listed.out.split()[:3] == ["weights", "ready", "3.0"]
    assert logged_in("datasets", "nlp").code == 3  # not a member: 404
    script = tmp_path / "reads.sh"
    script.write_text('sha256sum "$KAKEHASHI_DATA/weights" | tee "$KAKEHASHI_OUTPUT_DIR/digest.txt"\n'
                      'cp "$KAKEHASHI_DATA/weights" "$KAKEHASHI_OUTPUT_DIR/copy.bin"\n'
                      'ln -s "$KAKEHASHI_DATA/weights" "$KAKEHASHI_OUTPUT_DIR/link.bin"\n')
    unknown = logged_in("submit", str(script), "--project", "vision", "--hardware", "local-cpu", "--data", "nope")
    assert unknown.code == 3 and "[datasets]" in unknown.err and "no dataset named 'nope'" in unknown.err
    submitted = logged_in("--json", "submit", str(script), "--project", "vision", "--hardware", "local-cpu",
                          "--walltime", "10m", "--data", "weights")
    assert submitted.code == 0, submitted.err
    job_id = submitted.json()["id"]
    assert submitted.json()["datasets"] == ["weights"]
    job = Job.objects.get(pk=job_id)
    for _ in range(120):
        if job.artifacts.count() == 2:
            break
        time.sleep(0.5)
    listing = logged_in("outputs", str(job_id))
    assert listing.code == 0 and "digest.txt" in listing.out and "copy.bin" in listing.out
    assert "link.bin" not in listing.out  # a link is not followed: said on stderr, not listed
    assert "outputs: 1 file not collected: symbolic links or other files that are not regular files" in listing.err
    saved = tmp_path / "got.bin"
    got = logged_in("outputs", str(job_id), "--get", "copy.bin", "-o", str(saved))
    assert got.code == 0, got.err
    assert saved.read_bytes() == data.read_bytes()  # through the store's presigned URL, byte for byte
    digest = logged_in("outputs", str(job_id), "--get", "digest.txt", "-o", str(tmp_path / "digest.txt"))
    assert digest.code == 0 and hashlib.sha256(data.read_bytes()).hexdigest() in (tmp_path / "digest.txt").read_text()
    missing = logged_in("outputs", str(job_id), "--get", "../etc/passwd")
    assert missing.code == 3 and "no output" in missing.err
