"""Staging a dataset onto a cluster against a raw paramiko SFTP put of the same file over the same sshd.

Run with `make bench` or `python -m bench.staging` (the loopback test cluster must be up: tests/cluster/up.sh).
It starts SeaweedFS on a throwaway directory, puts one file of BENCH_STAGING_MIB (1 GiB) into it, and then, as
`alice` on the Slurm login node (port 2222), alternates for BENCH_STAGING_ROUNDS rounds:

- staging: what the dispatch worker does (`Backend.stage_data`, backends/staging.py): stream the object from the
           store (boto3 GET, as portal/storage/objectstore.open_stream) over SFTP into an empty per-project cache,
           SHA-256 of what arrived computed on the login node, rename, link into the job directory;
- raw put: paramiko's own `SFTPClient.putfo` of the same bytes from a local file, on a fresh connection.

It reports medians, bests and the per-round ratio, and the worker's peak RSS growth while staging (sampled from
/proc every 20 ms: staging must stream, not hold the file). Results are printed and written to
bench/results-staging.md (the README quotes them).
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SIZE_MIB = int(os.environ.get("BENCH_STAGING_MIB", "1024"))
ROUNDS = int(os.environ.get("BENCH_STAGING_ROUNDS", "3"))
CLUSTER = Path(os.environ.get("KAKEHASHI_CLUSTER_DIR", "/var/tmp/kakehashi-cluster"))
PORT = 2222
MiB = 1024 * 1024


def rss() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


class PeakRSS:
    """The highest resident size seen while the block runs, sampled by a thread."""

    def __enter__(self) -> PeakRSS:
        self.base = self.peak = rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, rss())

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss())

    @property
    def growth(self) -> int:
        return self.peak - self.base


def main() -> int:
    import hashlib

    import boto3
    import paramiko
    from botocore.config import Config

    from backends.base import DataFile, DataInput, JobSpec
    from backends.slurm import SlurmBackend
    from backends.transport import SSHTransport, load_private_key
    from tests.seaweedfs import SeaweedFS, free_port

    work = Path(tempfile.mkdtemp(prefix="kakehashi-bench-staging-"))
    source = work / "dataset.bin"
    digest = hashlib.sha256()
    with open(source, "wb") as fh:
        for _ in range(SIZE_MIB):
            chunk = os.urandom(MiB)
            digest.update(chunk)
            fh.write(chunk)
    sha256 = digest.hexdigest()
    store = SeaweedFS(work / "seaweedfs", free_port(), "bench", "bench-secret").start()
    try:
        store.create_bucket("bench")
        s3 = boto3.client("s3", endpoint_url=store.endpoint, region_name="us-east-1", aws_access_key_id="bench",
                          aws_secret_access_key="bench-secret",
                          config=Config(signature_version="s3v4", s3={"addressing_style": "path"}))
        s3.upload_file(str(source), "bench", "projects/bench/dataset.bin")
        key, known_hosts = (CLUSTER / "keys" / "alice").read_text(), (CLUSTER / "known_hosts").read_text()
        run = uuid.uuid4().hex[:8]
        base = f"kakehashi-bench/{run}"

        def staging() -> tuple[float, int, int]:
            transport = SSHTransport("127.0.0.1", PORT, "alice", key, known_hosts, timeout=120)
            backend = SlurmBackend(transport, {"data_cache": f"{base}/cache-{uuid.uuid4().hex[:6]}"})
            transport.run_shell("true")  # connected, as the worker's pooled connection is
            data = DataFile("", sha256, SIZE_MIB * MiB, lambda: s3.get_object(Bucket="bench",
                                                                            Key="projects/bench/dataset.bin")["Body"])
            spec = JobSpec(name="bench", payload="true", walltime_seconds=60, workdir=f"{base}/job")
            with PeakRSS() as memory:
                start = time.perf_counter()
                _, report = backend.stage_data(spec, "bench", [DataInput("dataset", files=[data])])
                seconds = time.perf_counter() - start
            assert report.copied_bytes == SIZE_MIB * MiB and transport.bytes_put == SIZE_MIB * MiB
            transport.run_shell(f"rm -rf {backend.settings['data_cache']}")
            transport.close()
            return seconds, memory.growth, transport.puts

        def raw_put() -> float:
            client = paramiko.SSHClient()
            client.load_host_keys(str(CLUSTER / "known_hosts"))
            client.set_missing_host_key_policy(paramiko.RejectPolicy())
            client.connect("127.0.0.1", port=PORT, username="alice", pkey=load_private_key(key),
                           allow_agent=False, look_for_keys=False)
            sftp = client.open_sftp()
            client.exec_command(f"mkdir -p {base}")[1].channel.recv_exit_status()
            start = time.perf_counter()
            with open(source, "rb") as fh:
                sftp.putfo(fh, f"{base}/raw.bin")
            seconds = time.perf_counter() - start
            sftp.remove(f"{base}/raw.bin")
            client.close()
            return seconds

        staged, raw, growth = [], [], []
        for _ in range(ROUNDS):
            seconds, grew, _puts = staging()
            staged.append(seconds)
            growth.append(grew)
            raw.append(raw_put())
            print(f"round: staging {staged[-1]:.2f} s (RSS +{grew / MiB:.1f} MiB), raw put {raw[-1]:.2f} s", flush=True)
        SSHTransport("127.0.0.1", PORT, "alice", key, known_hosts).run_shell(f"rm -rf {base}")
    finally:
        store.stop()
        source.unlink(missing_ok=True)

    ratios = [r / s for s, r in zip(staged, raw, strict=True)]
    load = os.getloadavg()[0]

    def speed(seconds: float) -> str:
        return f"{seconds:.2f} s ({SIZE_MIB / seconds:.0f} MiB/s)"

    lines = [
        f"{SIZE_MIB} MiB, {ROUNDS} rounds, Slurm login node of the loopback test cluster (OpenSSH, paramiko "
        f"{paramiko.__version__}), SeaweedFS on loopback, {time.strftime('%Y-%m-%d')}, 2 cores shared by the worker, "
        f"sshd, the store and other agents (load average at the end: {load:.1f}).",
        "",
        "| Path | median | best | speed vs raw put, paired by round (median) |",
        "| --- | --- | --- | --- |",
        f"| staging: object store GET → SFTP → SHA-256 on the login node → cache → link | {speed(statistics.median(staged))} "
        f"| {speed(min(staged))} | {statistics.median(ratios) * 100:.0f} % |",
        f"| raw paramiko `putfo` of the same file over the same sshd | {speed(statistics.median(raw))} | "
        f"{speed(min(raw))} | 100 % |",
        "",
        f"Worker peak RSS growth while staging: {max(growth) / MiB:.1f} MiB at most (per round: "
        f"{', '.join(f'{g / MiB:.1f}' for g in growth)} MiB).",
        f"All rounds (s): staging {', '.join(f'{s:.2f}' for s in staged)}; raw put {', '.join(f'{r:.2f}' for r in raw)}; "
        f"ratios {', '.join(f'{r * 100:.0f} %' for r in ratios)}.",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    (ROOT / "bench" / "results-staging.md").write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
