"""What runs inside an AWS Batch container for a Kakehashi job: pull, run, push, exit with the payload's status.

AWS Batch does not stage data, so the container does it itself (Metaflow's and Nextflow's Batch runners do the
same). This file is self-contained (the standard library and boto3, nothing of Kakehashi) because it is the
container's command: the job definition runs `python3 -c <this file>`, or a site bakes it into its images and
sets the cluster option "entrypoint" to its path. Without boto3 in the image it installs it into /tmp first.

1. Pull `<prefix>/bundle.tar` (the job directory the portal rendered: job.sh, payload.sh, the job's files, an
   array's element directories) and the objects KAKEHASHI_INPUTS lists ([{"bucket", "key", "path", "sha256"}],
   each path relative to the directory the payload runs in) from the object store (any S3 endpoint). An input
   with a "sha256" (a dataset's, as the portal recorded it at upload) is hashed as its bytes arrive; one that
   does not match is deleted, the payload does not run, and the job fails with exit status 65 (EX_DATAERR) and
   the reason in stderr.log and `kakehashi-failure`, which the portal shows as the job's reason.
2. Run `bash job.sh` there, its stdout and stderr going both to the container's own (CloudWatch Logs, which the
   portal's log view reads while the job runs) and to stdout.log/stderr.log.
3. Push outputs/, stdout.log, stderr.log and the exit status back under the job's prefix (an array element's
   under `<prefix>/<index>`), also after a SIGTERM (cancel, walltime), and exit with the payload's status. The
   sampler's files (kakehashi-samples/, which job.sh's sampler writes on every node that runs it) are pushed every
   KAKEHASHI_SAMPLE_PUSH_SECONDS (60) while the job runs, and once more at its end.

Multi-node jobs start this on every node: all of them run job.sh (torchrun on each node meets the others at the
main node's address) and push what they wrote to outputs/ (rank 0 may land on any node); the logs and the exit
status are the main node's, as the job's status is. A plain script on several nodes runs on the main node only,
as it does on a cluster, and the other nodes wait for Batch to stop them when it ends.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path

BOTO3_PIN = "boto3==1.44.5"
EXIT_BAD_INPUT = 65  # EX_DATAERR: an input is not the bytes the portal recorded
FAILURE_FILE = "kakehashi-failure"
CHUNK = 8 << 20


class InputMismatch(Exception):
    """An input's bytes are not what its recorded SHA-256 says: the payload must not run on them."""


def log(message: str) -> None:
    print(f"kakehashi-entrypoint: {message}", file=sys.stderr, flush=True)


def s3_client():
    try:
        import boto3
    except ImportError:
        target = "/tmp/kakehashi-boto3"
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--target", target, BOTO3_PIN], check=True)
        sys.path.insert(0, target)
        import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=os.environ.get("KAKEHASHI_S3_ENDPOINT_URL") or None,
        region_name=os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1",
        config=Config(signature_version="s3v4", s3={"addressing_style": "path"}, retries={"mode": "standard"}),
    )


def batch_identity(env: dict[str, str]) -> dict[str, str]:
    """The variables job.sh reads (backends/aws_batch.py's dialect), from the ones Batch sets."""
    job_id = env.get("AWS_BATCH_JOB_ID", "")
    # A multi-node job's nodes see "<id>#<node>": every node must agree on one rendezvous id.
    out = {"KAKEHASHI_BATCH_JOB_ID": job_id.split("#")[0]}
    # Only the other nodes are told the main node's address; the main node is the one without it.
    main = env.get("AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS") or own_address()
    out["KAKEHASHI_BATCH_MAIN_ADDR"] = main
    if env.get("AWS_BATCH_JOB_ARRAY_INDEX", "") != "":
        # Batch counts an array's elements from 0; the portal, like Slurm and Grid Engine here, from 1.
        out["KAKEHASHI_BATCH_ARRAY_ELEMENT"] = str(int(env["AWS_BATCH_JOB_ARRAY_INDEX"]) + 1)
    return out


def own_address() -> str:
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.connect(("10.255.255.255", 1))  # no packet is sent: this only picks the outgoing interface
            return sock.getsockname()[0]
    except OSError:
        return "127.0.0.1"


def is_main_node(env: dict[str, str]) -> bool:
    node, main = env.get("AWS_BATCH_JOB_NODE_INDEX"), env.get("AWS_BATCH_JOB_MAIN_NODE_INDEX")
    return node is None or main is None or node == main


def pull(s3, bucket: str, prefix: str, workdir: Path, rundir: Path, inputs: list[dict]) -> None:
    bundle = workdir / ".bundle.tar"
    s3.download_file(bucket, f"{prefix}/bundle.tar", str(bundle))
    with tarfile.open(bundle) as tar:
        tar.extractall(workdir, filter="data")  # noqa: S202 - the data filter refuses links and paths outside
    bundle.unlink()
    for item in inputs:  # into the directory the payload runs in (an array element's own), by relative path
        target = (rundir / item["path"]).resolve()
        if not str(target).startswith(str(rundir.resolve()) + os.sep):
            raise ValueError(f"input path {item['path']!r} leaves the job's directory")
        target.parent.mkdir(parents=True, exist_ok=True)
        source = item.get("bucket") or bucket
        if item.get("sha256"):
            fetch_checked(s3, source, item["key"], target, item["sha256"], item["path"])
            log(f"pulled s3://{source}/{item['key']} to {item['path']} (checked sha256 {item['sha256'][:12]}...)")
        else:
            s3.download_file(source, item["key"], str(target))
            log(f"pulled s3://{source}/{item['key']} to {item['path']}")


def fetch_checked(s3, bucket: str, key: str, target: Path, expected: str, shown: str) -> None:
    """One object to `target`, hashed while it streams in (no second read of a large file); on a mismatch
    nothing is left at `target`."""
    digest, size = hashlib.sha256(), 0
    partial = target.with_name(target.name + ".kakehashi-partial")
    try:
        body = s3.get_object(Bucket=bucket, Key=key)["Body"]
        with open(partial, "wb") as out:
            for chunk in body.iter_chunks(CHUNK):
                digest.update(chunk)
                out.write(chunk)
                size += len(chunk)
        if digest.hexdigest() != expected:
            raise InputMismatch(f"input {shown} (s3://{bucket}/{key}, {size} bytes) does not match its checksum: "
                                f"sha256 {digest.hexdigest()}, the portal recorded {expected}")
        partial.replace(target)
    finally:
        partial.unlink(missing_ok=True)


def _copy(stream, *sinks) -> None:
    for chunk in iter(lambda: stream.read1(65536), b""):
        for sink in sinks:
            sink.write(chunk)
            sink.flush()


def run(workdir: Path, rundir: Path, env: dict[str, str]) -> int:
    """bash job.sh, its output copied to the container's and to the run directory's log files."""
    rundir.mkdir(parents=True, exist_ok=True)
    with open(rundir / "stdout.log", "ab") as out, open(rundir / "stderr.log", "ab") as err:
        child = subprocess.Popen(["bash", "job.sh"], cwd=workdir, env=env, stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)

        def forward(signum, _frame):
            log(f"signal {signum}: stopping the job")
            try:
                os.killpg(child.pid, signum)
            except ProcessLookupError:
                pass

        signal.signal(signal.SIGTERM, forward)
        signal.signal(signal.SIGINT, forward)
        copiers = [threading.Thread(target=_copy, args=(child.stdout, sys.stdout.buffer, out), daemon=True),
                   threading.Thread(target=_copy, args=(child.stderr, sys.stderr.buffer, err), daemon=True)]
        for thread in copiers:
            thread.start()
        status = child.wait()
        for thread in copiers:
            thread.join(timeout=10)
    return 128 - status if status < 0 else status  # killed by a signal: the shell's convention


def push(s3, bucket: str, prefix: str, rundir: Path, status: int, *, main: bool = True) -> int:
    """outputs/ from every node (rank 0 of a torchrun job may land on any of them); the logs and the exit status
    from the main node, whose exit is the job's."""
    pushed = 0
    if main:
        (rundir / "kakehashi-exit-status").write_text(f"{status}\n")
        for name in ("stdout.log", "stderr.log", "kakehashi-exit-status", FAILURE_FILE):
            if (rundir / name).is_file():
                s3.upload_file(str(rundir / name), bucket, f"{prefix}/{name}")
    outputs = rundir / "outputs"
    if outputs.is_dir():
        for path in sorted(outputs.rglob("*")):
            if path.is_file() and not path.is_symlink():
                s3.upload_file(str(path), bucket, f"{prefix}/outputs/{path.relative_to(outputs).as_posix()}")
                pushed += 1
    return pushed


def push_samples(s3, bucket: str, prefix: str, rundir: Path) -> int:
    """The sampler's files (kakehashi-samples/<node>.log, backends/sampler.sh), whole, under the job's prefix: the
    portal reads them from there with offsets as it reads a cluster's (AWSBatchBackend.read_samples)."""
    pushed = 0
    for path in sorted((rundir / "kakehashi-samples").glob("*.log")):
        if path.is_file() and not path.is_symlink():
            s3.upload_file(str(path), bucket, f"{prefix}/kakehashi-samples/{path.name}")
            pushed += 1
    return pushed


def keep_pushing_samples(s3, bucket: str, prefix: str, rundir: Path, every: float, stop: threading.Event) -> None:
    """While the job runs, every `every` seconds: what the node used reaches the portal before the job ends (the
    idle rule acts on running jobs). A failed push is retried next time; it never touches the job."""
    while not stop.wait(every):
        try:
            push_samples(s3, bucket, prefix, rundir)
        except Exception as exc:  # noqa: BLE001 - the store may be briefly away: the next round pushes it all
            log(f"pushing samples failed (tried again in {every:g} s): {exc}")


def refuse(s3, bucket: str, prefix: str, rundir: Path, reason: str, *, main: bool) -> int:
    """The payload does not run: the reason goes to the container's log, stderr.log and kakehashi-failure."""
    log(reason)
    rundir.mkdir(parents=True, exist_ok=True)
    with open(rundir / "stderr.log", "a") as err:
        err.write(f"kakehashi-entrypoint: {reason}\n")
    (rundir / FAILURE_FILE).write_text(reason + "\n")
    push(s3, bucket, prefix, rundir, EXIT_BAD_INPUT, main=main)
    log(f"exit status {EXIT_BAD_INPUT}")
    return EXIT_BAD_INPUT


def main() -> int:
    env = dict(os.environ)
    bucket, prefix = env["KAKEHASHI_S3_BUCKET"], env["KAKEHASHI_S3_PREFIX"].rstrip("/")
    env.update(batch_identity(env))
    if env.get("KAKEHASHI_EVERY_NODE") != "1" and not is_main_node(env):
        log(f"node {env.get('AWS_BATCH_JOB_NODE_INDEX')}: the script runs on the main node; waiting for it to end")
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        while True:
            time.sleep(3600)
    workdir = Path(env.get("KAKEHASHI_WORK_DIR") or tempfile.mkdtemp(prefix="kakehashi-job-"))
    workdir.mkdir(parents=True, exist_ok=True)
    element = env.get("KAKEHASHI_BATCH_ARRAY_ELEMENT", "")
    rundir = workdir / element if element else workdir
    s3 = s3_client()
    started = time.monotonic()
    target = f"{prefix}/{element}" if element else prefix
    try:
        pull(s3, bucket, prefix, workdir, rundir, json.loads(env.get("KAKEHASHI_INPUTS") or "[]"))
    except InputMismatch as exc:
        return refuse(s3, bucket, target, rundir, str(exc), main=is_main_node(env))
    log(f"pulled s3://{bucket}/{prefix} in {time.monotonic() - started:.1f} s")
    stop = threading.Event()
    every = float(env.get("KAKEHASHI_SAMPLE_PUSH_SECONDS") or 60)
    pusher = threading.Thread(target=keep_pushing_samples, args=(s3, bucket, target, rundir, every, stop), daemon=True)
    pusher.start()
    status = run(workdir, rundir, env)
    stop.set()
    pusher.join(timeout=30)
    push_samples(s3, bucket, target, rundir)
    pushed = push(s3, bucket, target, rundir, status, main=is_main_node(env))
    log(f"pushed {pushed} file(s) from outputs/ to s3://{bucket}/{prefix}{'/' + element if element else ''}/outputs/")
    log(f"exit status {status}")
    return status


if __name__ == "__main__":
    sys.exit(main())
