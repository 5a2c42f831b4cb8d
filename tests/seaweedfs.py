"""A real S3 server for the tests and the benchmarks: SeaweedFS (`weed mini`, from requirements-seaweedfs.txt).

It checks SigV4 signatures (tampered or expired presigned URLs are refused), part checksums (BadDigest) and
Range requests, which moto does not. Every port is picked free, so parallel test runs on one machine never
meet, and its data lives in a throwaway directory (SeaweedFS keeps deleted data until a vacuum).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


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
                return self
            except urllib.error.HTTPError:
                return self  # it answers (403 to an unsigned request): ready
            except OSError:
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
