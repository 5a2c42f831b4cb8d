"""Bulk bytes to a login node through OpenSSH's own client (`ssh`), as the researcher's key, host key pinned.

Why a second SSH client beside paramiko (docs/decisions/0041): paramiko frames, encrypts and MACs every packet in
Python and moves about half of what OpenSSH moves on the same machine (1 GiB: paramiko `putfo` 4.4-5.1 s, `scp`
2.3-2.6 s at the issue's measurement). Commands stay on paramiko's pooled connection (~3 ms each); only streams of
data (a dataset's bytes, a tar of many small files) go through `ssh`, one process per stream.

How the key and the host key stay as safe as with paramiko:
- the private key never touches a disk and never appears in a command line: it is handed on stdin to `ssh-add -`
  for an `ssh-agent` of this stream's own, listening on a socket in a private (0700) directory, and the agent is
  stopped when the stream ends (and dies with the worker: PR_SET_PDEATHSIG where Linux offers it; the key leaves
  it after KEY_LIFETIME_SECONDS in any case);
- `ssh` reads no configuration (`-F /dev/null`), uses only that agent's key (`IdentitiesOnly` with the public
  half as IdentityFile), asks nothing (`BatchMode`), and checks the host key against the cluster's pinned lines
  only (`StrictHostKeyChecking=yes`, a known_hosts file of exactly those lines, no global one): a changed host key
  fails the stream as it fails a paramiko connection;
- what a command needs that is a secret (a presigned URL) travels on stdin, never in argv.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

# What a site may put in the cluster option `ssh_ciphers`: OpenSSH cipher names, comma-separated; a leading "^"
# puts them at the head of OpenSSH's own list instead of replacing it (ssh_config(5), OpenSSH 8.0 and later).
CIPHERS_RE = re.compile(r"\^?[a-z0-9@.-]+(,[a-z0-9@.-]+)*")
# Unless the site says otherwise, dataset streams offer AES-GCM first (with AES-NI it is about half the CPU of
# OpenSSH's default ChaCha20 here: 109 % of `scp` against 69 %, bench/README.md) and then OpenSSH's own list: the
# login node's sshd picks the first it allows, so a site that does not allow AES-GCM gets its usual cipher.
DEFAULT_CIPHERS = "^aes128-gcm@openssh.com,aes256-gcm@openssh.com"
AGENT_START_SECONDS = 5.0


def available() -> bool:
    return bool(shutil.which("ssh") and shutil.which("ssh-agent") and shutil.which("ssh-add"))


# The agent dies with the worker (PR_SET_PDEATHSIG). prctl is looked up here, once: between fork and exec the child
# only calls it, it loads nothing (a fork of a threaded process must not take locks another thread may hold).
try:
    _prctl = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):  # not Linux
    _prctl = None
# And the key leaves the agent after this long whatever happens (it is needed only to authenticate).
KEY_LIFETIME_SECONDS = 300


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    if _prctl is not None:
        _prctl(1, signal.SIGTERM)


def _private_dir() -> str:
    """A fresh 0700 directory, in memory where the machine has /dev/shm: nothing in it outlives the stream."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    return tempfile.mkdtemp(prefix="kakehashi-ssh-", dir=base)


@contextlib.contextmanager
def session(host: str, port: int, username: str, private_key: str, public_key: str, known_hosts: str, *,
            ciphers: str = "", connect_timeout: float = 30.0) -> Iterator[list[str]]:
    """The argv prefix of an `ssh` that reaches `username@host:port` with `private_key` (held by an agent of this
    session's own) and trusts only `known_hosts`; the agent and its directory are gone when the block ends."""
    ciphers = ciphers or DEFAULT_CIPHERS
    if not CIPHERS_RE.fullmatch(ciphers):
        raise ValueError(f"not a list of OpenSSH cipher names: {ciphers!r}")
    where = Path(_private_dir())
    agent = None
    try:
        (where / "known_hosts").write_text(known_hosts if known_hosts.endswith("\n") else known_hosts + "\n")
        (where / "id.pub").write_text(public_key + "\n")
        socket_path = where / "agent"
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(where), "SSH_AUTH_SOCK": str(socket_path)}
        agent = subprocess.Popen(["ssh-agent", "-D", "-a", str(socket_path)], stdin=subprocess.DEVNULL,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                                 preexec_fn=_die_with_parent)
        deadline = time.monotonic() + AGENT_START_SECONDS
        while not socket_path.exists():
            if agent.poll() is not None or time.monotonic() > deadline:
                raise OSError("ssh-agent did not start")
            time.sleep(0.005)
        while True:
            added = subprocess.run(["ssh-add", "-q", "-t", str(KEY_LIFETIME_SECONDS), "-"], input=private_key.encode(),
                                   env=env, capture_output=True, timeout=AGENT_START_SECONDS)
            # The socket exists from the agent's bind(), a moment before its listen(): a connect between is refused.
            if added.returncode == 0 or b"Error connecting to agent" not in added.stderr or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        if added.returncode != 0:
            raise OSError(f"ssh-add refused the key: {added.stderr.decode('utf-8', 'replace').strip()[:200]}")
        argv = ["ssh", "-F", "/dev/null", "-T", "-x", "-a",
                "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", "-o", "CheckHostIP=no",
                "-o", f"UserKnownHostsFile={where / 'known_hosts'}", "-o", "GlobalKnownHostsFile=/dev/null",
                "-o", "UpdateHostKeys=no", "-o", f"IdentityAgent={socket_path}", "-o", "IdentitiesOnly=yes",
                "-o", f"IdentityFile={where / 'id.pub'}", "-o", "PasswordAuthentication=no",
                "-o", "KbdInteractiveAuthentication=no", "-o", "ControlMaster=no", "-o", "ControlPath=none",
                "-o", f"ConnectTimeout={max(1, int(connect_timeout))}", "-o", "ServerAliveInterval=15",
                "-o", "ServerAliveCountMax=4", "-o", "LogLevel=ERROR", "-o", "Compression=no",
                "-o", f"Ciphers={ciphers}",
                "-p", str(int(port)), "-l", username, "--", host]
        yield argv
    finally:
        if agent is not None:
            agent.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                agent.wait(2)
            if agent.poll() is None:
                agent.kill()
                agent.wait()
        shutil.rmtree(where, ignore_errors=True)


def environment() -> dict[str, str]:
    """What `ssh` itself runs with: no agent of the worker's, no locale or config that would change its words."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"}
