"""Goal 1 of issue 28: one large file staged to a cluster against OpenSSH's `scp` of the same file to the same
login node, in the same run (docs/decisions/0041).

Run with `make bench` or `python -m bench.staging` (the loopback test cluster must be up: tests/cluster/up.sh).
It starts SeaweedFS on a throwaway directory and puts one file of each size in BENCH_STAGING_SIZES (MiB; default
1024, and 10240 with BENCH_STAGING_LARGE=1) into it; then, as alice on the Slurm login node (port 2222), for
BENCH_STAGING_ROUNDS rounds (the order of the paths rotates each round, so none always runs first or last):

- scp:                 `scp` of the local file (OpenSSH's default cipher), the yardstick;
- staging:             what the dispatch worker does (`Backend.stage_data`, one stream by default): the object
                       streamed from the store (boto3 GET) through OpenSSH's client into the login node's python3,
                       which hashes and writes it in one pass, renamed into an empty per-project cache once its
                       SHA-256 matches, linked into the job directory;
- staging, 2 streams:  the same with the cluster option ssh_streams = 2: two ranges of the object on two
                       connections, each written at its offset, the whole file hashed once both landed;
- scp, AES-GCM:        `scp -c aes128-gcm@openssh.com`, the yardstick where the site allows that cipher;
- staging, AES-GCM:    staging with the cluster option `ssh_ciphers` = that cipher;
- staging, paramiko:   the same staging with bulk bytes on paramiko's channel (the path before this change moved
                       them over paramiko's SFTP at 87 % of paramiko's `putfo`; kept as the fallback);
- paramiko putfo:      paramiko's own `SFTPClient.putfo`, the previous yardstick.

Each round checks that the cache holds the file under its SHA-256. The worker's peak RSS growth while staging is
sampled from /proc every 20 ms. Results: printed and written to bench/results-staging.md.
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

SIZES = [int(s) for s in os.environ.get("BENCH_STAGING_SIZES", "1024" + (",10240" if os.environ.get(
    "BENCH_STAGING_LARGE") else "")).split(",")]
ROUNDS = int(os.environ.get("BENCH_STAGING_ROUNDS", "5"))
LARGE_ROUNDS = int(os.environ.get("BENCH_STAGING_LARGE_ROUNDS", "2"))  # rounds for sizes over 4 GiB


def main() -> int:
    import paramiko

    work = Path(tempfile.mkdtemp(prefix="kakehashi-bench-staging-", dir="/var/tmp"))
    load = dp.Load()
    server, s3 = dp.store(work)
    base = f"kakehashi-bench/{uuid.uuid4().hex[:8]}"
    dp.remote(f"mkdir -p {base}")
    try:
        sections = [one_size(size_mib, work, s3, base) for size_mib in SIZES]
    finally:
        server.stop()
        dp.remote(f"rm -rf {base}")
        shutil.rmtree(work, ignore_errors=True)
    text = "\n".join([
        f"Issue 28, goal 1: one large file staged against OpenSSH `scp` to the same login node (the Slurm node of the "
        f"loopback test cluster, OpenSSH 9.2 both ends, paramiko {paramiko.__version__}), SeaweedFS on loopback, "
        f"{time.strftime('%Y-%m-%d')}; {load.text()}.",
        "",
        *sections,
    ])
    print(text)
    (ROOT / "bench" / "results-staging.md").write_text(text)
    return 0


def one_size(size_mib: int, work: Path, s3, base: str) -> str:
    import paramiko

    from backends.base import DataInput, JobSpec
    from backends.slurm import SlurmBackend
    from backends.transport import load_private_key

    size = size_mib * dp.MiB
    source = work / f"dataset-{size_mib}.bin"
    digest = hashlib.sha256()
    with open(source, "wb") as fh:
        for _ in range(size_mib):
            chunk = os.urandom(dp.MiB)
            digest.update(chunk)
            fh.write(chunk)
    sha256 = digest.hexdigest()
    key = f"projects/bench/dataset-{size_mib}.bin"
    s3.upload_file(str(source), "bench", key)
    data = dp.data_file(s3, key, "", sha256, size)
    memory: list[int] = []

    def staging(streams: int = 0, **options):
        transport = dp.transport(**options)
        cache = f"{base}/cache-{uuid.uuid4().hex[:6]}"
        backend = SlurmBackend(transport, {"data_cache": cache, **({"ssh_streams": streams} if streams else {})})
        transport.run_shell("true")  # connected, as the worker's pooled connection is
        spec = JobSpec(name="bench", payload="true", walltime_seconds=60, workdir=f"{base}/job")
        with dp.PeakRSS() as peak:
            start = time.perf_counter()
            _, report = backend.stage_data(spec, "bench", [DataInput("dataset", files=[data])])
            seconds = time.perf_counter() - start
        memory.append(peak.growth)
        assert report.copied_bytes == size and transport.bytes_put == size
        assert dp.remote(f"stat -c %s {cache}/bench/{sha256}").strip() == str(size)
        transport.run_shell(f"rm -rf {cache}")
        transport.close()
        return seconds

    def scp(cipher: str = ""):
        seconds = dp.timed(["scp", "-q", *dp.ssh_options(cipher), "-P", str(dp.PORT), str(source),
                            f"{dp.USER}@127.0.0.1:{base}/scp.bin"])
        dp.remote(f"rm -f {base}/scp.bin")
        return seconds

    def putfo():
        client = paramiko.SSHClient()
        client.load_host_keys(str(dp.CLUSTER / "known_hosts"))
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        client.connect("127.0.0.1", port=dp.PORT, username=dp.USER, pkey=load_private_key(dp.key()),
                       allow_agent=False, look_for_keys=False)
        sftp = client.open_sftp()
        start = time.perf_counter()
        with open(source, "rb") as fh:
            sftp.putfo(fh, f"{base}/putfo.bin")
        seconds = time.perf_counter() - start
        sftp.remove(f"{base}/putfo.bin")
        client.close()
        return seconds

    paths = {
        "scp": lambda: scp(),
        "staging": lambda: staging(),
        "staging, 2 streams": lambda: staging(2),
        "scp, AES-GCM": lambda: scp(dp.GCM),
        "staging, AES-GCM": lambda: staging(ciphers=dp.GCM),
        "staging, paramiko": lambda: staging(1, bulk="paramiko"),
        "paramiko putfo": putfo,
    }
    rounds = ROUNDS if size_mib <= 4096 else LARGE_ROUNDS
    if size_mib > 4096:  # the slowest two are known from 1 GiB: 10 GiB measures what the goal asks
        paths.pop("staging, paramiko")
        paths.pop("paramiko putfo")
    times: dict[str, list[float]] = {name: [] for name in paths}
    names = list(paths)
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            times[name].append(paths[name]())
        print(f"{size_mib} MiB round {r + 1}: " + ", ".join(f"{n} {t[-1]:.2f} s" for n, t in times.items()),
              flush=True)
    source.unlink()
    s3.delete_object(Bucket="bench", Key=key)
    return _table(size_mib, size, rounds, times, memory)


def _table(size_mib: int, size: int, rounds: int, times: dict[str, list[float]], memory: list[int]) -> str:
    def row(name: str, yardstick: str) -> str:
        median, ratios = dp.ratio(times[yardstick], times[name])
        return (f"| {name} | {dp.seconds(times[name])} | {dp.speed(size, times[name])} | "
                f"{median * 100:.0f} % of {yardstick} ({dp.percent(ratios)}) |")

    lines = [f"### {size_mib} MiB, {rounds} rounds", "",
             "| Path | median time | median speed | speed vs the yardstick, paired by round: median (each round) |",
             "| --- | --- | --- | --- |",
             row("scp", "scp"), row("staging", "scp"), row("staging, 2 streams", "scp"),
             row("scp, AES-GCM", "scp, AES-GCM"),
             row("staging, AES-GCM", "scp, AES-GCM"), row("staging, AES-GCM", "scp")]
    if "paramiko putfo" in times:
        lines += [row("staging, paramiko", "scp"), row("paramiko putfo", "scp")]
    lines += ["", f"Worker peak RSS growth while staging: {max(memory) / dp.MiB:.1f} MiB at most over "
                  f"{len(memory)} stagings.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
