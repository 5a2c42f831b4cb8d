"""Goal 2 of issue 28: direct pull (cluster option data_pull) against the store's own throughput: boto3's download of
the same object on the same host, in the same run (docs/decisions/0042).

Run with `make bench` or `python -m bench.pull` (the loopback test cluster must be up). It starts SeaweedFS on a
throwaway directory, puts one object of BENCH_PULL_MIB (1024) into it, then for BENCH_PULL_ROUNDS rounds (order
rotating):

- boto3:    `download_file` of the object to a local file (boto3's transfer manager: 8 MiB ranges, 10 threads),
            the yardstick;
- pull:     `Backend.stage_data` with data_pull: the worker signs a GET and hands it to the Slurm login node (as
            alice, over SSH, the URL on stdin), whose python3 fetches ranges in parallel into the cache, hashes them
            as they land, and names the file by its SHA-256; the worker relays no byte (checked);
- relayed:  the same staging without data_pull (the object through the worker), for comparison.

The login node is this same machine, so both read the store on loopback as a login node beside a store would.
Results: printed and written to bench/results-pull.md.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import datapath as dp  # noqa: E402

SIZE_MIB = int(os.environ.get("BENCH_PULL_MIB", "1024"))
ROUNDS = int(os.environ.get("BENCH_PULL_ROUNDS", "5"))


def main() -> int:
    import backends.staging_pull
    from backends.base import DataInput, JobSpec

    # What was tried (bench/README.md): the login node's threads and range size.
    backends.staging_pull.THREADS = int(os.environ.get("BENCH_PULL_THREADS", backends.staging_pull.THREADS))
    backends.staging_pull.RANGE_BYTES = int(os.environ.get("BENCH_PULL_RANGE_MIB", backends.staging_pull.RANGE_BYTES
                                                           >> 20)) << 20
    from backends.slurm import SlurmBackend

    work = Path(tempfile.mkdtemp(prefix="kakehashi-bench-pull-", dir="/var/tmp"))
    load = dp.Load()
    server, s3 = dp.store(work)
    base = f"kakehashi-bench/{uuid.uuid4().hex[:8]}"
    size = SIZE_MIB * dp.MiB
    source = work / "dataset.bin"
    digest = hashlib.sha256()
    with open(source, "wb") as fh:
        for _ in range(SIZE_MIB):
            chunk = os.urandom(dp.MiB)
            digest.update(chunk)
            fh.write(chunk)
    sha256 = digest.hexdigest()
    s3.upload_file(str(source), "bench", "projects/bench/dataset.bin")
    source.unlink()
    data = dp.data_file(s3, "projects/bench/dataset.bin", "", sha256, size)

    def boto3_download() -> float:
        target = work / "downloaded.bin"
        start = time.perf_counter()
        s3.download_file("bench", "projects/bench/dataset.bin", str(target))
        seconds = time.perf_counter() - start
        assert target.stat().st_size == size
        target.unlink()
        return seconds

    def staging(pull: bool) -> float:
        transport = dp.transport()
        cache = f"{base}/cache-{uuid.uuid4().hex[:6]}"
        backend = SlurmBackend(transport, {"data_cache": cache, **({"data_pull": "presigned"} if pull else {})})
        transport.run_shell("true")
        spec = JobSpec(name="bench", payload="true", walltime_seconds=60, workdir=f"{base}/job")
        start = time.perf_counter()
        _, report = backend.stage_data(spec, "bench", [DataInput("dataset", files=[data])])
        seconds = time.perf_counter() - start
        assert report.copied_bytes == size and report.pulled_bytes == (size if pull else 0)
        assert transport.bytes_put == (0 if pull else size)
        assert dp.remote(f"stat -c %s {cache}/bench/{sha256}").strip() == str(size)
        transport.run_shell(f"rm -rf {cache}")
        transport.close()
        return seconds

    paths = {"boto3": boto3_download, "pull": lambda: staging(True), "relayed": lambda: staging(False)}
    times: dict[str, list[float]] = {name: [] for name in paths}
    names = list(paths)
    try:
        for r in range(ROUNDS):
            for name in names[r % len(names):] + names[:r % len(names)]:
                times[name].append(paths[name]())
            print(f"round {r + 1}: " + ", ".join(f"{n} {t[-1]:.2f} s" for n, t in times.items()), flush=True)
    finally:
        server.stop()
        dp.remote(f"rm -rf {base}")
        shutil.rmtree(work, ignore_errors=True)

    def row(name: str) -> str:
        median, ratios = dp.ratio(times["boto3"], times[name])
        return (f"| {name} | {dp.seconds(times[name])} | {dp.speed(size, times[name])} | "
                f"{median * 100:.0f} % ({dp.percent(ratios)}) |")

    text = "\n".join([
        f"Issue 28, goal 2: direct pull against boto3's download of the same object on the same host; {SIZE_MIB} MiB, "
        f"{ROUNDS} rounds, {backends.staging_pull.THREADS} threads × {backends.staging_pull.RANGE_BYTES >> 20} MiB "
        f"ranges on the login node, SeaweedFS on loopback, the Slurm login node of the loopback test cluster, "
        f"{time.strftime('%Y-%m-%d')}; {load.text()}.",
        "",
        "| Path | median time | median speed | speed vs boto3, paired by round: median (each round) |",
        "| --- | --- | --- | --- |",
        row("boto3"), row("pull"), row("relayed"),
        "",
    ])
    print(text)
    (ROOT / "bench" / "results-pull.md").write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
