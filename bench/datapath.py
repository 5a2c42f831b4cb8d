"""What the data-path benchmarks share (bench/staging.py, bench/pull.py, bench/folder.py): a SeaweedFS of their
own, the Slurm login node of the loopback test cluster as alice, OpenSSH's own tools as yardsticks, peak RSS, the
machine's load while they run, and the tables they write."""

from __future__ import annotations

import os
import statistics
import subprocess
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLUSTER = Path(os.environ.get("KAKEHASHI_CLUSTER_DIR", "/var/tmp/kakehashi-cluster"))
PORT = 2222  # the Slurm login node
USER = "alice"
MiB = 1024 * 1024
GCM = "aes128-gcm@openssh.com"


def key() -> str:
    return (CLUSTER / "keys" / USER).read_text()


def known_hosts() -> str:
    return (CLUSTER / "known_hosts").read_text()


def ssh_options(cipher: str = "") -> list[str]:
    """OpenSSH's command-line tools as a person runs them: their key file, the pinned host key."""
    return ["-i", str(CLUSTER / "keys" / USER), "-o", f"UserKnownHostsFile={CLUSTER / 'known_hosts'}",
            "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", *(["-c", cipher] if cipher else [])]


def timed(argv: list[str], **kwargs) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, **kwargs)
    return time.perf_counter() - start


def remote(command: str) -> str:
    return subprocess.run(["ssh", *ssh_options(), "-p", str(PORT), f"{USER}@127.0.0.1", command], check=True,
                          capture_output=True, text=True).stdout


def transport(**kwargs):
    from backends.transport import SSHTransport

    return SSHTransport("127.0.0.1", PORT, USER, key(), known_hosts(), timeout=120, **kwargs)


def rss() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


class PeakRSS:
    """The highest resident size of this process seen while the block runs, sampled by a thread."""

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


class Load:
    """The machine's 1-minute load average, sampled every 5 s while the benchmark runs (2 cores, shared)."""

    def __init__(self) -> None:
        self.samples: list[float] = [os.getloadavg()[0]]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(5):
            self.samples.append(os.getloadavg()[0])

    def text(self) -> str:
        self._stop.set()
        return (f"load average (1 min) while it ran: {min(self.samples):.1f}–{max(self.samples):.1f}, median "
                f"{statistics.median(self.samples):.1f}, on 2 cores")


def store(work: Path):
    """A SeaweedFS of this benchmark's own (throwaway directory) and a boto3 client for it."""
    import boto3
    from botocore.config import Config

    from tests.seaweedfs import SeaweedFS, free_port

    server = SeaweedFS(work / "seaweedfs", free_port(), "bench", "bench-secret").start()
    server.create_bucket("bench")
    s3 = boto3.client("s3", endpoint_url=server.endpoint, region_name="us-east-1", aws_access_key_id="bench",
                      aws_secret_access_key="bench-secret",
                      config=Config(signature_version="s3v4", s3={"addressing_style": "path"},
                                    max_pool_connections=32))
    return server, s3


def data_file(s3, key: str, path: str, sha256: str, size: int, bucket: str = "bench"):
    """A dataset's file as the portal hands it to staging: a boto3 GET stream (whole or a range), and a presigned
    GET (portal/storage/datasets.py makes the same three from its own client)."""
    from backends.spec import DataFile

    return DataFile(path, sha256, size, lambda: s3.get_object(Bucket=bucket, Key=key)["Body"],
                    open_range=lambda start, end: s3.get_object(Bucket=bucket, Key=key,
                                                                Range=f"bytes={start}-{end - 1}")["Body"],
                    get_url=lambda: s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": key},
                                                              ExpiresIn=3600),
                    presign=lambda: s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": key},
                                                              ExpiresIn=3600))


def seconds(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} s (best {min(values):.2f})"


def speed(size: int, values: list[float]) -> str:
    return f"{size / MiB / statistics.median(values):.0f} MiB/s"


def ratio(yardstick: list[float], ours: list[float]) -> tuple[float, list[float]]:
    """Our speed as a share of the yardstick's, paired round by round (the median of the rounds' ratios)."""
    ratios = [y / o for y, o in zip(yardstick, ours, strict=True)]
    return statistics.median(ratios), ratios


def percent(values: list[float]) -> str:
    return ", ".join(f"{v * 100:.0f} %" for v in values)
