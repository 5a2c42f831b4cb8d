"""Direct uploads against boto3's own multipart upload, to the same S3 server (SeaweedFS) in the same run.

Run with `make bench` (after bench/run.py) or `python -m bench.storage`. It starts SeaweedFS on a throwaway
directory and the portal on a local port (PostgreSQL test database, as the test suite does), then uploads one
file of BENCH_UPLOAD_MIB (1 GiB) through:

- portal:  `kakehashi upload`'s own code (kakehashi_cli.upload.Uploader), driven from Python: the whole file's
           SHA-256, create, then per part its SHA-256, a signing request to the portal and a presigned PUT bound
           to that checksum, then complete (the portal lists the parts and the store checks the checksums). The
           browser's Uppy makes the same requests.
- boto3:   `S3.upload_file` with the same part size and the same number of threads, straight to the store with
           the portal's credentials (no portal involved, so no per-part checksum it would have to sign), and with
           boto3's defaults (8 MiB parts, 10 threads).

Rounds alternate the three so drift on a shared machine falls on all; medians, bests and the per-round ratios of
BENCH_UPLOAD_ROUNDS rounds are reported.

After each portal upload, the whole-file check a worker runs before the file is usable (`verify_upload`: the object
read back from the store and hashed, portal/storage/verify.py) is timed in this process, against the raw read-back
of the same object (boto3 `get_object` streamed through hashlib's SHA-256 in the same 4 MiB chunks): what a
researcher waits between the upload's end and the file's `ready`, beyond the worker picking the task up.
Results are printed and written to bench/results-storage.md (the README quotes them).
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "cli"))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")

SIZE_MIB = int(os.environ.get("BENCH_UPLOAD_MIB", "1024"))
ROUNDS = int(os.environ.get("BENCH_UPLOAD_ROUNDS", "3"))
PART_MIB = int(os.environ.get("BENCH_UPLOAD_PART_MIB", "64"))
THREADS = int(os.environ.get("BENCH_UPLOAD_THREADS", "4"))
MiB = 1024 * 1024


def main() -> int:
    import django

    django.setup()
    from django.conf import settings
    from django.db import connection
    from django.test.utils import setup_test_environment

    from tests.seaweedfs import SeaweedFS

    setup_test_environment()
    work = Path(tempfile.mkdtemp(prefix="kakehashi-bench-storage-"))
    store = SeaweedFS(work / "seaweedfs", int(os.environ["KAKEHASHI_TEST_S3_PORT"]),
                      settings.KAKEHASHI_S3_ACCESS_KEY_ID, settings.KAKEHASHI_S3_SECRET_ACCESS_KEY).start()
    db_name = connection.creation.create_test_db(verbosity=0, autoclobber=True)
    try:
        store.create_bucket(settings.KAKEHASHI_S3_BUCKET)
        return _run(store, work)
    finally:
        connection.creation.destroy_test_db(db_name, verbosity=0)
        store.stop()
        for path in sorted(work.rglob("*"), reverse=True):
            path.unlink() if path.is_file() else path.rmdir()
        work.rmdir()


def _run(store, work: Path) -> int:
    import boto3.s3.transfer
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.test.testcases import LiveServerThread
    from kakehashi_cli.client import Client
    from kakehashi_cli.upload import Uploader

    from portal.api.tokens import issue_token
    from portal.projects.models import Membership, Project, Role

    settings.KAKEHASHI_UPLOAD_PART_BYTES = PART_MIB * MiB
    user = get_user_model().objects.create_user("alice", "alice@example.org", "x")
    project = Project.objects.create(slug="bench", name="Bench", storage_quota_bytes=0)
    Membership.objects.create(user=user, project=project, role=Role.OWNER)
    token = issue_token(user, name="bench", scopes=["read", "submit"])[1]
    server = LiveServerThread("127.0.0.1", static_handler=lambda app: app)
    server.daemon = True
    server.start()
    server.is_ready.wait()
    if server.error:
        raise server.error
    portal = Client(f"http://127.0.0.1:{server.port}", token, timeout=600)

    source = work / "upload.bin"
    with open(source, "wb") as handle:
        for _ in range(SIZE_MIB // 64 or 1):
            handle.write(os.urandom(min(64, SIZE_MIB) * MiB))
    size = source.stat().st_size
    s3 = store.client()
    same = boto3.s3.transfer.TransferConfig(multipart_threshold=8 * MiB, multipart_chunksize=PART_MIB * MiB,
                                            max_concurrency=THREADS)
    default = boto3.s3.transfer.TransferConfig()
    samples: dict[str, list[float]] = {"portal": [], "boto3 same": [], "boto3 default": []}
    checks: dict[str, list[float]] = {"verify": [], "raw read-back": []}
    for round_no in range(ROUNDS):
        for name in samples:
            key = f"bench/{name.replace(' ', '-')}-{round_no}.bin"
            start = time.perf_counter()
            if name == "portal":
                stored = Uploader(portal, "bench", threads=THREADS, show_progress=False).upload_file(
                    str(source), key)
                assert stored["size"] == size
                samples[name].append(time.perf_counter() - start)
                checks["verify"].append(_verify(stored, size))
                checks["raw read-back"].append(_read_back(s3, settings.KAKEHASHI_S3_BUCKET, f"projects/bench/{key}"))
                s3.delete_object(Bucket=settings.KAKEHASHI_S3_BUCKET, Key=f"projects/bench/{key}")
                continue
            else:
                s3.upload_file(str(source), settings.KAKEHASHI_S3_BUCKET, key,
                               Config=same if name == "boto3 same" else default)
            samples[name].append(time.perf_counter() - start)
            s3.delete_object(Bucket=settings.KAKEHASHI_S3_BUCKET, Key=key)
    server.terminate()

    def rate(seconds: float) -> float:
        return size / MiB / seconds

    median = {name: statistics.median(values) for name, values in samples.items()}
    best = {name: min(values) for name, values in samples.items()}

    def paired(name: str) -> float:
        """boto3's time over the other's in the same round, median over rounds: load that drifts between rounds
        falls on both sides of each ratio."""
        return 100 * statistics.median(b / p for b, p in zip(samples["boto3 same"], samples[name], strict=True))

    def row(label: str, name: str, parts: str, threads: int) -> str:
        return (f"| {label} | {parts} | {threads} | {median[name]:.2f} s ({rate(median[name]):.0f} MiB/s) | "
                f"{best[name]:.2f} s ({rate(best[name]):.0f} MiB/s) | {paired(name):.0f} % |")

    lines = [
        f"{size / MiB:.0f} MiB, {ROUNDS} rounds, SeaweedFS {_weed_version()} on loopback, {time.strftime('%Y-%m-%d')}, "
        f"{os.cpu_count()} cores shared by client, portal and store (load average at the end: "
        f"{os.getloadavg()[0]:.1f}).",
        "",
        "| Path | parts | threads | median | best | speed vs boto3 (same parts), paired by round |",
        "| --- | --- | --- | --- | --- | --- |",
        row("portal: `kakehashi upload` code (SHA-256 of file and parts, presigned PUTs, complete)", "portal",
            f"{PART_MIB} MiB", THREADS),
        row("boto3 `upload_file`, same part size and threads", "boto3 same", f"{PART_MIB} MiB", THREADS),
        row("boto3 `upload_file`, its defaults", "boto3 default", "8 MiB", 10),
        "",
        "All rounds (s): " + "; ".join(f"{name} {', '.join(f'{v:.2f}' for v in values)}"
                                      for name, values in samples.items()),
        "",
        "The whole-file check before the file is `ready` (a file of several parts), after each portal upload:",
        "",
        "| Check | median | best | vs the raw read-back, paired by round |",
        "| --- | --- | --- | --- |",
        *[f"| {label} | {statistics.median(checks[name]):.2f} s ({rate(statistics.median(checks[name])):.0f} MiB/s) "
          f"| {min(checks[name]):.2f} s | ×{statistics.median(v / r for v, r in zip(checks[name], checks['raw read-back'], strict=True)):.2f} |"
          for label, name in [("portal: `verify_upload` (read back from the store, SHA-256, file made ready)", "verify"),
                              ("raw: boto3 `get_object` streamed through SHA-256, 4 MiB chunks", "raw read-back")]],
        "",
        "All rounds (s): " + "; ".join(f"{name} {', '.join(f'{v:.2f}' for v in values)}" for name, values in checks.items()),
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    (ROOT / "bench" / "results-storage.md").write_text(text)
    return 0


def _verify(stored: dict, size: int) -> float:
    """Seconds `verify_upload` takes to make this portal upload ready (it must: the bytes are the uploader's)."""
    from portal.storage.models import FileState, StoredFile, UploadSession
    from portal.storage.verify import verify_upload

    session = UploadSession.objects.filter(stored_file_id=stored["id"]).latest("created_at")
    start = time.perf_counter()
    outcome = verify_upload(session.pk)
    seconds = time.perf_counter() - start
    assert outcome == "verified", outcome
    assert StoredFile.objects.get(pk=stored["id"]).state == FileState.READY and session.size == size
    return seconds


def _read_back(s3, bucket: str, key: str) -> float:
    """Seconds to read an object back and hash it with boto3 alone, in verify's chunk size."""
    import hashlib

    from portal.storage.verify import HASH_CHUNK

    start = time.perf_counter()
    digest = hashlib.sha256()
    body = s3.get_object(Bucket=bucket, Key=key)["Body"]
    for chunk in body.iter_chunks(HASH_CHUNK):
        digest.update(chunk)
    body.close()
    return time.perf_counter() - start


def _weed_version() -> str:
    import subprocess

    from tests.seaweedfs import weed_binary

    out = subprocess.run([weed_binary(), "version"], capture_output=True, text=True, timeout=30).stdout
    return out.split()[2] if len(out.split()) > 2 else "?"


if __name__ == "__main__":
    raise SystemExit(main())
