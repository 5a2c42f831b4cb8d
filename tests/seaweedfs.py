"""A real S3 server for the tests and the benchmarks: SeaweedFS (`weed mini`, from requirements-seaweedfs.txt).

It checks SigV4 signatures (tampered or expired presigned URLs are refused), part checksums (BadDigest) and
Range requests, which moto does not. Every port is picked free, so parallel test runs on one machine never
meet, and its data lives in a throwaway directory (SeaweedFS keeps deleted data until a vacuum).
"""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

_GIVEN: set[int] = set()


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A free loopback port below the kernel's ephemeral range. A port from bind(0) is an ephemeral one: any outgoing
    connection (to PostgreSQL, Redis, sshd) may take it between the moment it is picked and the moment the server
    binds it, which happens when several runs or xdist workers start their servers together."""
    low = _ephemeral_low()
    start = max(1024, low - 17000)
    # Each xdist worker of a run draws from its own slice: two workers starting their servers at once never pick one
    # port (tests/settings.py gives each worker its own S3 server, hub, providers).
    worker, count = os.environ.get("PYTEST_XDIST_WORKER", ""), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
    if worker[2:].isdigit() and count > 1:
        width = (low - start) // count
        start += int(worker[2:]) % count * width
        low = start + width
    for _ in range(200):
        port = random.randrange(start, low)
        if port in _GIVEN:  # handed out already and maybe not bound yet (a server takes several at once)
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        _GIVEN.add(port)
        return port
    raise RuntimeError("no free loopback port below the ephemeral range")


def weed_binary() -> str:
    candidate = Path(sys.executable).parent / "weed"
    if candidate.exists():
        return str(candidate)
    found = shutil.which("weed")
    if not found:
        raise RuntimeError("SeaweedFS is not installed: run `make dev-venv` (requirements-seaweedfs.txt)")
    return found


@dataclass
class SeaweedFS:
    directory: Path
    s3_port: int
    access_key: str
    secret_key: str
    process: subprocess.Popen | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.s3_port}"

    def start(self, timeout: float = 60.0) -> SeaweedFS:
        self.directory.mkdir(parents=True, exist_ok=True)
        ports = {name: free_port() for name in (
            "master.port", "master.port.grpc", "volume.port", "volume.port.grpc", "filer.port", "filer.port.grpc",
            "s3.port.grpc", "admin.port", "admin.port.grpc", "webdav.port", "debug.port")}
        args = [weed_binary(), "mini", f"-dir={self.directory}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
                "-webdav=false", "-admin.ui=false", "-s3.port.iceberg=0", "-s3.port.lance=0", "-master.telemetry=false",
                f"-s3.port={self.s3_port}", *(f"-{name}={port}" for name, port in ports.items())]
        env = {**os.environ, "AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key}
        log = open(self.directory / "weed.log", "ab")  # noqa: SIM115 - the server's lifetime, closed in stop()
        self._log = log
        self.process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"SeaweedFS exited at start; see {self.directory / 'weed.log'}")
            try:
                urllib.request.urlopen(self.endpoint + "/", timeout=1)  # noqa: S310 - loopback
            except urllib.error.HTTPError as answer:
                # It answers (403 to an unsigned request): ready, if it is this server's S3 and not another process
                # that holds the port (this one then exits: "address already in use").
                if b"<Error>" in answer.read() and self.process.poll() is None:
                    return self
                time.sleep(0.1)
            except OSError:
                time.sleep(0.1)
            else:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"SeaweedFS did not answer on {self.endpoint} within {timeout:.0f} s")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, 9)
                self.process.wait(timeout=10)
        if getattr(self, "_log", None):
            self._log.close()

    def client(self):
        import boto3
        from botocore.config import Config

        return boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                            aws_access_key_id=self.access_key, aws_secret_access_key=self.secret_key,
                            config=Config(signature_version="s3v4", s3={"addressing_style": "path"}))

    def create_bucket(self, name: str) -> None:
        client = self.client()
        deadline = time.monotonic() + 30
        while True:  # the filer may need a moment after the S3 port opens
            try:
                client.create_bucket(Bucket=name)
                return
            except client.exceptions.BucketAlreadyOwnedByYou:
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)
