"""Goal 3 of issue 28: a dataset folder of 10,000 files, uploaded with `kakehashi upload` against boto3's best for
the same files, and staged to a cluster against `tar c | ssh tar x` of the same folder, in the same run
(docs/decisions/0041, 0043).

Run with `make bench` or `python -m bench.folder` (the loopback test cluster must be up). It starts SeaweedFS and
the portal on local ports (a PostgreSQL test database, as bench/storage.py does) and makes two folders in
/var/tmp:

- "100 KiB": BENCH_FOLDER_FILES (10,000) files of 100 KiB, 100 to a directory, as ImageNet's JPEGs sit;
- "mix":     as many files, log-uniform 4 KiB–512 KiB, and 50 of them log-uniform 1–50 MiB.

For each folder, BENCH_FOLDER_ROUNDS rounds (order rotating):
- upload, kakehashi: the real `kakehashi upload FOLDER` (its own process, as a researcher runs it) to a fresh path;
- upload, boto3:     `upload_file` of every file from a thread pool of 16 and of 32 threads, straight to the store
                     with its credentials (no portal, no checksum bound to each PUT); its best per round is the
                     yardstick;
- staging:           the folder as a dataset (`Backend.stage_data`, from the store, into an empty cache on the Slurm
                     login node, as alice): one tar stream of files named by SHA-256, each hashed there, then one tar
                     of links making the folder's tree in the job directory;
- tar over ssh:      `tar c -C FOLDER . | ssh login 'tar x -C DIR'` (OpenSSH's default cipher), the yardstick;
- packing:           what the worker does in the background once the upload completed (portal/storage/packs.py,
                     docs/decisions/0062): every small file fetched, hashed and written into packs of up to 5,000
                     files, a few tar objects in the store (round 1; later rounds upload the same contents, which
                     the packs already hold);
- staging, packed:   the same staging when the folder's files sit in packs: a few ranged GETs of the packs spliced
                     into the stream, each file still checked by its SHA-256 on the login node;
- staging, again:    a second job with the same folder (the cache already holds it): must send nothing;
- staging, pulled:   the same staging with data_pull (the login node fetches the 10,000 objects itself);
- store GETs alone:  the worker's side of staging only (every object fetched and framed, sent nowhere): the floor
                     that one GET per file puts under a first staging.

Results: printed and written to bench/results-folder.md.
"""

from __future__ import annotations

import dataclasses
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "cli"))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")

from bench import datapath as dp  # noqa: E402

FILES = int(os.environ.get("BENCH_FOLDER_FILES", "10000"))
ROUNDS = int(os.environ.get("BENCH_FOLDER_ROUNDS", "2"))
FOLDERS = os.environ.get("BENCH_FOLDER_KINDS", "100 KiB,mix").split(",")
KiB = 1024


def make_folder(where: Path, kind: str) -> list[tuple[Path, str]]:
    """(file, path inside the folder) of a new folder of `kind`."""
    rng = random.Random(28)
    files = []
    for i in range(FILES):
        if kind == "mix":
            size = int(math.exp(rng.uniform(math.log(4 * KiB), math.log(512 * KiB))))
            if i % (FILES // 50) == 0:
                size = int(math.exp(rng.uniform(math.log(dp.MiB), math.log(50 * dp.MiB))))
        else:
            size = 100 * KiB
        rel = f"n{i // 100:05d}/img_{i:07d}.JPEG"
        path = where / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(size))
        files.append((path, rel))
    return files


def main() -> int:
    import django

    django.setup()
    from django.conf import settings
    from django.db import connection
    from django.test.utils import setup_test_environment

    from tests.seaweedfs import SeaweedFS

    setup_test_environment()
    work = Path(tempfile.mkdtemp(prefix="kakehashi-bench-folder-", dir="/var/tmp"))
    store = SeaweedFS(work / "seaweedfs", int(os.environ["KAKEHASHI_TEST_S3_PORT"]),
                      settings.KAKEHASHI_S3_ACCESS_KEY_ID, settings.KAKEHASHI_S3_SECRET_ACCESS_KEY).start()
    db_name = connection.creation.create_test_db(verbosity=0, autoclobber=True)
    try:
        store.create_bucket(settings.KAKEHASHI_S3_BUCKET)
        return _run(store, work)
    finally:
        connection.creation.destroy_test_db(db_name, verbosity=0)
        store.stop()
        shutil.rmtree(work, ignore_errors=True)


def _run(store, work: Path) -> int:
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.test.testcases import LiveServerThread

    from portal.api.tokens import issue_token
    from portal.projects.models import Membership, Project, Role

    load = dp.Load()
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
    import boto3
    from botocore.config import Config

    s3 = boto3.client("s3", endpoint_url=store.endpoint, region_name="us-east-1",
                      aws_access_key_id=settings.KAKEHASHI_S3_ACCESS_KEY_ID,
                      aws_secret_access_key=settings.KAKEHASHI_S3_SECRET_ACCESS_KEY,
                      config=Config(signature_version="s3v4", s3={"addressing_style": "path"}, max_pool_connections=64))
    bucket = settings.KAKEHASHI_S3_BUCKET
    base = f"kakehashi-bench/{uuid.uuid4().hex[:8]}"
    dp.remote(f"mkdir -p {base}")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("KAKEHASHI_")},
           "KAKEHASHI_URL": f"http://127.0.0.1:{server.port}", "KAKEHASHI_TOKEN": token,
           "XDG_CONFIG_HOME": str(work / "cli-config")}
    kakehashi = str(Path(sys.executable).parent / "kakehashi")
    sections = []
    try:
        for kind in FOLDERS:
            sections.append(one_folder(kind, work, s3, bucket, base, env, kakehashi, project))
    finally:
        server.terminate()
        dp.remote(f"rm -rf {base}")
    text = "\n".join([
        f"Issue 28, goal 3: a folder of {FILES:,} files uploaded with `kakehashi upload` against boto3 and staged to the "
        f"Slurm login node of the loopback test cluster against `tar c | ssh tar x`; SeaweedFS and the portal (one "
        f"process, PostgreSQL) on loopback, {ROUNDS} rounds, {time.strftime('%Y-%m-%d')}; {load.text()}.",
        "",
        *sections,
    ])
    print(text)
    (ROOT / "bench" / "results-folder.md").write_text(text)
    return 0


def one_folder(kind: str, work: Path, s3, bucket: str, base: str, env: dict, kakehashi: str, project) -> str:
    from backends.base import DataInput, JobSpec
    from backends.slurm import SlurmBackend
    from portal.storage import packs
    from portal.storage.models import StoredFile

    folder = work / f"folder-{kind.replace(' ', '')}"
    files = make_folder(folder, kind)
    total = sum(path.stat().st_size for path, _ in files)
    times: dict[str, list[float]] = {}
    sent: dict[str, list[int]] = {}
    uploaded_as: list[str] = []

    def cli_upload(dest: str) -> float:
        start = time.perf_counter()
        done = subprocess.run([kakehashi, "upload", str(folder), "--project", "bench", "--dest", dest],
                              env=env, capture_output=True, text=True)
        seconds = time.perf_counter() - start
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith(f"Uploaded {FILES} file(s)"), done.stdout
        uploaded_as.append(dest)
        return seconds

    def boto3_upload(threads: int, prefix: str) -> float:
        start = time.perf_counter()
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(lambda f: s3.upload_file(str(f[0]), bucket, f"{prefix}/{f[1]}"), files))
        return time.perf_counter() - start

    def dataset(dest: str, packed: bool = False) -> DataInput:
        rows = StoredFile.objects.filter(project=project, path__startswith=dest + "/")
        places = packs.places(project, rows) if packed else {}
        return DataInput("set", files=[
            dataclasses.replace(dp.data_file(s3, row.storage_name, row.path[len(dest) + 1:], row.sha256, row.size,
                                             bucket), packed=places.get(row.sha256)) for row in rows])

    def pack() -> float:
        start = time.perf_counter()
        packs.pack_project(project.pk)
        return time.perf_counter() - start

    def stage(data: DataInput, cache: str, name: str, **options) -> float:
        transport = dp.transport()
        backend = SlurmBackend(transport, {"data_cache": cache, **options})
        transport.run_shell("true")
        spec = JobSpec(name="bench", payload="true", walltime_seconds=60, workdir=f"{base}/job-{uuid.uuid4().hex[:6]}")
        start = time.perf_counter()
        _, report = backend.stage_data(spec, "bench", [data])
        seconds = time.perf_counter() - start
        sent.setdefault(name, []).append(transport.bytes_put)
        links = dp.remote(f"find {spec.workdir}/data/set -type l | wc -l").strip()
        assert links == str(FILES), links
        transport.close()
        return seconds

    def tar_ssh() -> float:
        target = f"{base}/tar-{uuid.uuid4().hex[:6]}"
        dp.remote(f"mkdir -p {target}")
        seconds = dp.timed(["bash", "-c", f"tar c -C {folder} . | ssh {' '.join(dp.ssh_options())} "
                                           f"-p {dp.PORT} {dp.USER}@127.0.0.1 'tar x -C {target}'"])
        dp.remote(f"rm -rf {target}")
        return seconds

    for r in range(ROUNDS):
        dest = f"{kind.replace(' ', '')}-{r}"
        paths = {
            "upload, kakehashi": lambda dest=dest: cli_upload(dest),
            "upload, boto3 16 threads": lambda r=r: boto3_upload(16, f"boto3-16-{kind}-{r}"),
            "upload, boto3 32 threads": lambda r=r: boto3_upload(32, f"boto3-32-{kind}-{r}"),
        }
        names = list(paths)
        for name in names[r % len(names):] + names[:r % len(names)]:
            times.setdefault(name, []).append(paths[name]())
        times.setdefault("upload, boto3 best", []).append(
            min(times["upload, boto3 16 threads"][-1], times["upload, boto3 32 threads"][-1]))
        data = dataset(uploaded_as[-1])
        assert len(data.files) == FILES
        times.setdefault("store GETs alone", []).append(fetch_only(data))
        if r == 0:
            times["packing"] = [pack()]
        in_packs = dataset(uploaded_as[-1], packed=True)
        assert sum(f.packed is not None for f in in_packs.files) == sum(f.size < packs.SMALL for f in data.files)
        cache = f"{base}/cache-{uuid.uuid4().hex[:6]}"
        pulled = f"{base}/cache-{uuid.uuid4().hex[:6]}"
        from_packs = f"{base}/cache-{uuid.uuid4().hex[:6]}"
        staging = {
            "staging": lambda data=data, cache=cache: stage(data, cache, "staging"),
            "tar over ssh": tar_ssh,
            "staging, pulled": lambda data=data, pulled=pulled: stage(data, pulled, "staging, pulled",
                                                                      data_pull="presigned"),
            "staging, packed": lambda data=in_packs, cache=from_packs: stage(data, cache, "staging, packed"),
        }
        names = list(staging)
        for name in names[r % len(names):] + names[:r % len(names)]:
            times.setdefault(name, []).append(staging[name]())
        times.setdefault("staging, again", []).append(stage(data, cache, "staging, again"))
        dp.remote(f"rm -rf {cache} {pulled} {from_packs} {base}/job-*")
        print(f"{kind} round {r + 1}: " + ", ".join(f"{n} {t[-1]:.2f} s" for n, t in times.items()), flush=True)
    assert sent["staging, again"] == [0] * ROUNDS and sent["staging, pulled"] == [0] * ROUNDS
    shutil.rmtree(folder)
    return _table(kind, total, times, sent)


def fetch_only(data) -> float:
    """What the worker's side of staging costs without SSH or the login node: every file fetched from the store
    (presigned GETs, 16 threads) and framed as the tar stream, read to nowhere. The floor of a first staging."""
    from backends.staging_copy import TarStream

    start = time.perf_counter()
    stream = TarStream(data.files)
    try:
        while stream.read(1 << 20):
            pass
    finally:
        stream.close()
    return time.perf_counter() - start


def _table(kind: str, total: int, times: dict[str, list[float]], sent: dict[str, list[int]]) -> str:
    def row(name: str, yardstick: str) -> str:
        median, ratios = dp.ratio(times[yardstick], times[name])
        return (f"| {name} | {dp.seconds(times[name])} | {FILES / min(times[name]):.0f} files/s, "
                f"{dp.speed(total, times[name])} | {median * 100:.0f} % of {yardstick} ({dp.percent(ratios)}) |")

    return "\n".join([
        f"### {kind}: {FILES:,} files, {total / dp.MiB:.0f} MiB", "",
        "| Path | median time | best files/s, median speed | speed vs the yardstick, paired by round: median (each round) |",
        "| --- | --- | --- | --- |",
        row("upload, boto3 best", "upload, boto3 best"), row("upload, boto3 16 threads", "upload, boto3 best"),
        row("upload, boto3 32 threads", "upload, boto3 best"), row("upload, kakehashi", "upload, boto3 best"),
        row("tar over ssh", "tar over ssh"), row("staging", "tar over ssh"), row("staging, packed", "tar over ssh"),
        row("staging, pulled", "tar over ssh"), row("staging, again", "tar over ssh"),
        row("store GETs alone", "tar over ssh"), "",
        f"Packing (the worker, in the background once the upload completed; round 1): {times['packing'][0]:.2f} s, "
        f"{FILES / times['packing'][0]:.0f} files/s.", "",
        f"Bytes the worker sent to the login node: staging {', '.join(str(b) for b in sent['staging'])}; "
        f"staging, packed {', '.join(str(b) for b in sent['staging, packed'])}; "
        f"staging, again {', '.join(str(b) for b in sent['staging, again'])} (nothing: the cache held every file); "
        f"staging, pulled {', '.join(str(b) for b in sent['staging, pulled'])} (the login node fetched them).", "",
    ])


if __name__ == "__main__":
    raise SystemExit(main())
