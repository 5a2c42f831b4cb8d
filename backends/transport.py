"""How commands reach a cluster: SSH to its login node (paramiko), or the portal host itself.

Both transports take either an argv list (quoted here, never interpreted) or a shell snippet that a backend
composed from quoted parts. SSH connections are pooled per (host, port, user, key) and reused, because a
fresh connect+auth costs ~70 ms while an exec on an open connection costs ~3 ms.

Why one module: the Transport interface, its two implementations and the SSH connection pool the SSH one
needs are one piece, read together; backends see only `Transport`, and the portal none of it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import os
import select
import shlex
import socket
import subprocess
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import paramiko

from backends import openssh

# Bytes moved per read or write when streaming: large enough to keep SFTP's pipeline full, small enough that a
# worker staging many files at once stays within a few MiB each.
STREAM_CHUNK = 1 << 20


class TransportError(Exception):
    """The login node could not be reached or did not answer in time. Retryable."""


class HostKeyMismatch(TransportError):
    """The login node presented a host key other than the pinned one. Never auto-accepted."""


@dataclass(frozen=True)
class CommandResult:
    exit_status: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.exit_status == 0

    @property
    def message(self) -> str:
        """The most useful text for a person: stderr if any, else stdout."""
        return (self.stderr.strip() or self.stdout.strip())[:2000]


# A stream that moved no byte for this long is given up (a worker heartbeats the dispatch lease until then).
STALL_SECONDS = 300.0
# The most of a streaming command's stdout and stderr kept (they carry a few lines: sizes, digests, reasons).
PIPE_OUTPUT_LIMIT = 4 << 20
F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)
PIPE_BYTES = 1 << 20


class Transport(ABC):
    # What this transport streamed in bulk (`pipe`, `write_stream`): how many streams, how many bytes. Staging
    # reports it; tests and benchmarks measure it ("a second job sends nothing").
    puts = 0
    bytes_put = 0

    @abstractmethod
    def run_shell(self, command: str, *, stdin: bytes | None = None, timeout: float | None = None) -> CommandResult:
        """Run a shell command line whose every user-derived part the caller has already quoted."""

    def run(self, argv: Sequence[str], *, stdin: bytes | None = None, timeout: float | None = None) -> CommandResult:
        return self.run_shell(shlex.join(argv), stdin=stdin, timeout=timeout)

    @abstractmethod
    def read_file(self, path: str, *, offset: int = 0, limit: int = 1 << 20) -> bytes:
        """Bytes of a file on the cluster from `offset`; b"" if it does not exist (yet)."""

    def write_stream(self, path: str, source: BinaryIO, *, chunk: int = STREAM_CHUNK) -> int:
        """Write everything `source` yields to `path` on the cluster, `chunk` bytes at a time (memory stays bounded
        whatever the size); returns the bytes written."""
        raise NotImplementedError(f"{type(self).__name__} cannot write files")

    def read_stream(self, path: str, *, chunk: int = STREAM_CHUNK) -> Iterator[bytes]:
        """The bytes of a file on the cluster, `chunk` at a time (a large output never sits whole in memory)."""
        raise NotImplementedError(f"{type(self).__name__} cannot stream files")

    def pipe(self, command: str, source: BinaryIO, *, timeout: float | None = None,
             heartbeat: Callable[[], None] | None = None, stall: float = STALL_SECONDS,
             chunk: int = STREAM_CHUNK, counted: bool = True, cancel: threading.Event | None = None) -> CommandResult:
        """Run `command` with everything `source` yields as its stdin, streamed (memory stays bounded whatever the
        size). `heartbeat` is called on the caller's thread every few seconds until the command ends, as long as
        bytes moved in the last `stall` seconds (a stream stuck longer is cut: TransportError); `timeout` bounds
        the time the command takes after its input ended (a checksum of what arrived). `counted`: the stream
        carries data (counted in `puts` and `bytes_put`; over SSH on the fastest client), not only what to do with
        it (links, a list of URLs: on the pooled connection, with no new handshake). `cancel`: set by
        another thread to cut the stream (TransportError), e.g. when a sibling stream of the same file failed."""
        raise NotImplementedError(f"{type(self).__name__} cannot stream to a command")

    def open_stream(self, host: str, port: int, *, timeout: float | None = None):
        """A two-way byte stream to `host`:`port` as the place this transport reaches sees it (the login node, as
        this account), for one forwarded connection (backends/forward.py). TransportError if it cannot be opened."""
        raise NotImplementedError(f"{type(self).__name__} cannot open streams")

    def close(self) -> None:  # noqa: B027 - optional for transports without resources
        pass


HEARTBEAT_EVERY = 15.0  # seconds between two heartbeats of a stream (tests make it shorter)


class _Feed:
    """Copies `source` into `write` on a thread of its own; the caller's thread waits, beats and watches for a stall.
    Why that way round: a heartbeat writes to the database, and a worker's database connection is its thread's."""

    def __init__(self, source: BinaryIO, write: Callable[[bytes], object], close: Callable[[], object],
                 abort: Callable[[], object], chunk: int, fd: int | None = None) -> None:
        self.sent, self.moved_at, self.error = 0, time.monotonic(), None
        self.done = threading.Event()
        self._source, self._write, self._close, self._abort, self._chunk = source, write, close, abort, chunk
        self._fd = fd  # the sink as a file descriptor (a pipe), for a source that can splice into it
        self._thread = threading.Thread(target=self._run, daemon=True, name="kakehashi-feed")
        self._thread.start()

    def _moved(self, n: int) -> None:
        self.sent += n
        self.moved_at = time.monotonic()

    def _run(self) -> None:
        try:
            splice = getattr(self._source, "splice_into", None)
            if splice is not None and self._fd is not None:
                # The kernel moves the bytes from the source's socket into the pipe: none pass through Python.
                splice(self._fd, self._moved)
                return
            while data := self._source.read(self._chunk):
                self._write(data)
                self._moved(len(data))
        except (BrokenPipeError, ConnectionResetError):
            pass  # the command ended before reading everything: its exit status says why
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            # The source failed (the object store, say): the command must not take a cut stream for a whole one.
            self.error = exc
            with contextlib.suppress(Exception):
                self._abort()
        finally:
            with contextlib.suppress(Exception):
                self._close()
            self.done.set()

    def watch(self, finished: Callable[[float], bool], heartbeat: Callable[[], None] | None, stall: float,
              timeout: float, kill: Callable[[], None], where: str, cancel: threading.Event | None = None) -> None:
        """Wait until `finished(wait)` says the command ended, beating meanwhile; kill it if the stream stalls or,
        once its input is all sent, if it outlasts `timeout`."""
        beat_at = time.monotonic()
        ended_at: float | None = None
        while not finished(min(1.0, HEARTBEAT_EVERY)):
            now = time.monotonic()
            if cancel is not None and cancel.is_set():
                kill()
                raise TransportError(f"the transfer to {where} was cut short ({self.sent} bytes sent)")
            if self.done.is_set():
                ended_at = ended_at or now
                if now - ended_at > timeout:
                    kill()
                    raise TransportError(f"the command on {where} did not finish {timeout:.0f} s after its input")
            elif now - self.moved_at > stall:
                kill()
                raise TransportError(f"the transfer to {where} stalled: no byte moved for {stall:.0f} s "
                                     f"({self.sent} bytes sent)")
            if heartbeat is not None and now - beat_at >= HEARTBEAT_EVERY:
                beat_at = now
                heartbeat()
        self.done.wait()
        if self.error is not None:
            raise self.error


def _pipe_process(argv: Sequence[str], source: BinaryIO, *, where: str, timeout: float,
                  heartbeat: Callable[[], None] | None, stall: float, chunk: int, env=None, cwd=None,
                  cancel: threading.Event | None = None) -> tuple[
                      CommandResult, int]:
    """`_Feed` into a local process (bash for the local transport, OpenSSH's `ssh` for a login node)."""
    proc = subprocess.Popen(list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env, cwd=cwd, start_new_session=True, bufsize=0)
    with contextlib.suppress(OSError):  # a 1 MiB pipe: 16 times fewer wake-ups than Linux's 64 KiB default
        fcntl.fcntl(proc.stdin.fileno(), F_SETPIPE_SZ, PIPE_BYTES)
    out, err = bytearray(), bytearray()

    def drain(stream, into: bytearray) -> None:
        while data := stream.read(65536):
            if len(into) < PIPE_OUTPUT_LIMIT:
                into += data

    readers = [threading.Thread(target=drain, args=(proc.stdout, out), daemon=True),
               threading.Thread(target=drain, args=(proc.stderr, err), daemon=True)]
    for reader in readers:
        reader.start()
    feed = _Feed(source, proc.stdin.write, proc.stdin.close, proc.kill, chunk, fd=proc.stdin.fileno())

    def finished(wait: float) -> bool:
        try:
            proc.wait(wait)
            return True
        except subprocess.TimeoutExpired:
            return False

    try:
        feed.watch(finished, heartbeat, stall, timeout, proc.kill, where, cancel)
    except BaseException:
        proc.kill()
        proc.wait()
        feed.done.wait(5)
        raise
    for reader in readers:
        reader.join()
    return CommandResult(proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")), feed.sent



class LocalTransport(Transport):
    """Commands on the portal host itself, relative paths resolved against `base_dir`."""

    def __init__(self, base_dir: str | os.PathLike[str], timeout: float = 30.0, path_prefix: Sequence[str] = ()) -> None:
        self.base_dir = Path(base_dir)
        self.timeout = timeout
        self.env = None
        if path_prefix:
            self.env = {**os.environ, "PATH": os.pathsep.join([*path_prefix, os.environ.get("PATH", "")])}

    def run_shell(self, command: str, *, stdin: bytes | None = None, timeout: float | None = None) -> CommandResult:
        self.base_dir.mkdir(parents=True, exist_ok=True)
        try:
            proc = subprocess.run(
                ["/bin/bash", "-c", command],
                input=stdin if stdin is not None else b"",
                capture_output=True,
                cwd=self.base_dir,
                env=self.env,
                timeout=timeout or self.timeout,
                start_new_session=True,
            )
        except subprocess.TimeoutExpired as exc:
            raise TransportError(f"local command timed out after {exc.timeout} s") from None
        return CommandResult(
            proc.returncode, proc.stdout.decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace")
        )

    def read_file(self, path: str, *, offset: int = 0, limit: int = 1 << 20) -> bytes:
        full = self.base_dir / path
        try:
            with open(full, "rb") as fh:
                fh.seek(offset)
                return fh.read(limit)
        except FileNotFoundError:
            return b""

    def write_stream(self, path: str, source: BinaryIO, *, chunk: int = STREAM_CHUNK) -> int:
        written = 0
        with open(self.base_dir / path, "wb") as fh:
            while data := source.read(chunk):
                fh.write(data)
                written += len(data)
        return written

    def pipe(self, command: str, source: BinaryIO, *, timeout: float | None = None,
             heartbeat: Callable[[], None] | None = None, stall: float = STALL_SECONDS,
             chunk: int = STREAM_CHUNK, counted: bool = True, cancel: threading.Event | None = None) -> CommandResult:
        self.base_dir.mkdir(parents=True, exist_ok=True)
        result, sent = _pipe_process(["/bin/bash", "-c", command], source, where="the portal host",
                                     timeout=timeout or self.timeout, heartbeat=heartbeat, stall=stall, chunk=chunk,
                                     env=self.env, cwd=self.base_dir, cancel=cancel)
        if counted:
            self.puts += 1
            self.bytes_put += sent
        return result

    def read_stream(self, path: str, *, chunk: int = STREAM_CHUNK) -> Iterator[bytes]:
        with open(self.base_dir / path, "rb") as fh:
            while data := fh.read(chunk):
                yield data

    def open_stream(self, host: str, port: int, *, timeout: float | None = None) -> socket.socket:
        try:
            sock = socket.create_connection((host, int(port)), timeout=timeout or self.timeout)
        except OSError as exc:
            raise TransportError(f"cannot reach {host}:{port} from the portal host: {exc.strerror or exc}") from None
        sock.settimeout(None)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock


def load_private_key(pem: str, passphrase: str | None = None) -> paramiko.PKey:
    """A paramiko key from OpenSSH/PEM text of any type paramiko supports."""
    last: Exception | None = None
    for cls in (paramiko.Ed25519Key, paramiko.ECDSAKey, paramiko.RSAKey):
        try:
            return cls.from_private_key(io.StringIO(pem), password=passphrase)
        except (paramiko.SSHException, ValueError) as exc:
            last = exc
    raise ValueError(f"not a usable private key ({type(last).__name__})")


def host_keys_from_text(known_hosts: str) -> paramiko.HostKeys:
    """Pinned host keys in known_hosts format; lines that do not parse are an error, not skipped."""
    keys = paramiko.HostKeys()
    for number, line in enumerate(known_hosts.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        entry = paramiko.hostkeys.HostKeyEntry.from_line(line, number)
        if entry is None or entry.key is None:
            raise ValueError(f"host key line {number} is not in known_hosts format")
        for name in entry.hostnames:
            keys.add(name, entry.key.get_name(), entry.key)
    return keys


class _PinnedKeyPolicy(paramiko.MissingHostKeyPolicy):
    def missing_host_key(self, client, hostname, key):  # noqa: ANN001 - paramiko's signature
        raise HostKeyMismatch(
            f"{hostname} offered a {key.get_name()} host key that is not pinned for this cluster "
            f"(SHA256 fingerprint {fingerprint(key)}); an admin must verify and pin it"
        )


def fingerprint(key: paramiko.PKey) -> str:
    import base64

    return "SHA256:" + base64.b64encode(hashlib.sha256(key.asbytes()).digest()).decode().rstrip("=")


class SSHTransport(Transport):
    """Commands on a login node over SSH. Cheap to construct: the connection underneath is pooled."""

    _pool: dict[tuple, _Connection] = {}
    _pool_lock = threading.Lock()

    def __init__(
        self,
        host: str,
        port: int,
        username: str,
        private_key: str,
        known_hosts: str,
        *,
        timeout: float = 30.0,
        bulk: str = "",
        ciphers: str = "",
    ) -> None:
        self.host, self.port, self.username = host, int(port), username
        self._private_key = private_key
        self._known_hosts = known_hosts
        self.timeout = timeout
        # How `pipe` moves bulk bytes: "openssh" (OpenSSH's own client, backends/openssh.py: about twice paramiko's
        # speed), "paramiko" (an exec channel on the pooled connection), "" = OpenSSH where its client is installed.
        if bulk not in ("", "openssh", "paramiko"):
            raise ValueError(f"bulk must be openssh or paramiko, not {bulk!r}")
        self.bulk = bulk or ("openssh" if openssh.available() else "paramiko")
        # OpenSSH cipher names for bulk streams where the site allows a faster one (cluster option ssh_ciphers).
        if ciphers and not openssh.CIPHERS_RE.fullmatch(ciphers):
            raise ValueError(f"not a list of OpenSSH cipher names: {ciphers!r}")
        self.ciphers = ciphers
        # What this transport streamed (files over SFTP, streams to commands; bytes): staging reports it, tests and
        # benchmarks measure it.
        self.puts = 0
        self.bytes_put = 0
        key_id = hashlib.sha256(private_key.encode() + b"\0" + known_hosts.encode()).hexdigest()
        # The pid is part of the key: a connection opened before a fork is never shared with the child.
        self._pool_key = (os.getpid(), host, self.port, username, key_id)

    def __repr__(self) -> str:  # never show the key
        return f"SSHTransport({self.username}@{self.host}:{self.port})"

    def _connection(self) -> _Connection:
        with self._pool_lock:
            conn = self._pool.get(self._pool_key)
            if conn is None:
                conn = _Connection(self)
                self._pool[self._pool_key] = conn
        return conn

    def run_shell(self, command: str, *, stdin: bytes | None = None, timeout: float | None = None) -> CommandResult:
        return self._connection().exec(command, stdin, timeout or self.timeout)

    def read_file(self, path: str, *, offset: int = 0, limit: int = 1 << 20) -> bytes:
        return self._connection().read_file(path, offset, limit, self.timeout)

    def write_stream(self, path: str, source: BinaryIO, *, chunk: int = STREAM_CHUNK) -> int:
        written = self._connection().write_stream(path, source, chunk, self.timeout)
        self.puts += 1
        self.bytes_put += written
        return written

    def read_stream(self, path: str, *, chunk: int = STREAM_CHUNK) -> Iterator[bytes]:
        return self._connection().read_stream(path, chunk, self.timeout)

    def open_stream(self, host: str, port: int, *, timeout: float | None = None) -> paramiko.Channel:
        """A direct-tcpip channel of the pooled connection: the login node, as this account, connects to host:port
        (the connection's host key checked as for every command)."""
        return self._connection().open_stream(host, int(port), timeout or self.timeout)

    def pipe(self, command: str, source: BinaryIO, *, timeout: float | None = None,
             heartbeat: Callable[[], None] | None = None, stall: float = STALL_SECONDS,
             chunk: int = STREAM_CHUNK, counted: bool = True, cancel: threading.Event | None = None) -> CommandResult:
        timeout = timeout or self.timeout
        if self.bulk == "openssh" and counted:
            result, sent = self._pipe_openssh(command, source, timeout, heartbeat, stall, chunk, cancel)
        else:
            result, sent = self._connection().pipe(command, source, timeout, heartbeat, stall, chunk, cancel)
        if counted:
            self.puts += 1
            self.bytes_put += sent
        return result

    def _pipe_openssh(self, command: str, source: BinaryIO, timeout: float, heartbeat, stall: float,
                      chunk: int, cancel: threading.Event | None) -> tuple[CommandResult, int]:
        try:
            key = load_private_key(self._private_key)
        except ValueError as exc:
            raise TransportError(f"the SSH key for {self.username} cannot be used: {exc}") from None
        try:
            with openssh.session(self.host, self.port, self.username, self._private_key,
                                 f"{key.get_name()} {key.get_base64()}", self._known_hosts, ciphers=self.ciphers,
                                 connect_timeout=self.timeout) as argv:
                result, sent = _pipe_process([*argv, command], source, where=self.host, timeout=timeout,
                                             heartbeat=heartbeat, stall=stall, chunk=chunk,
                                             env=openssh.environment(), cancel=cancel)
        except OSError as exc:
            raise TransportError(f"OpenSSH's client could not be started for {self.host}: {exc}") from None
        if result.exit_status == 255:
            # ssh's own failure (the remote command's statuses are its own, never 255 here).
            said = result.stderr.strip()
            if "Host key verification failed" in said or "HOST IDENTIFICATION HAS CHANGED" in said:
                raise HostKeyMismatch(f"{self.host}:{self.port} presented a host key other than the pinned one: "
                                      "refusing to send data")
            if "Permission denied" in said:
                raise TransportError(f"the login node refused the key for {self.username}: {said[:300]}")
            raise TransportError(f"SSH to {self.host}:{self.port} failed: {said[:500] or 'no reason given'}")
        return result, sent

    def close(self) -> None:
        with self._pool_lock:
            conn = self._pool.pop(self._pool_key, None)
        if conn:
            conn.close()

    @classmethod
    def close_all(cls) -> None:
        with cls._pool_lock:
            conns = list(cls._pool.values())
            cls._pool.clear()
        for conn in conns:
            conn.close()


class _Connection:
    """One paramiko client, opened lazily, reopened once if the login node dropped it."""

    def __init__(self, spec: SSHTransport) -> None:
        self.spec = spec
        self.client: paramiko.SSHClient | None = None
        self.sftp: paramiko.SFTPClient | None = None
        self.lock = threading.Lock()
        self.sftp_lock = threading.Lock()

    def _open(self) -> paramiko.SSHClient:
        spec = self.spec
        client = paramiko.SSHClient()
        try:
            pinned = host_keys_from_text(spec._known_hosts)
        except ValueError as exc:
            raise TransportError(f"the cluster's pinned host key is malformed: {exc}") from None
        for hostname, entries in pinned.items():
            for keytype, key in entries.items():
                client.get_host_keys().add(hostname, keytype, key)
        client.set_missing_host_key_policy(_PinnedKeyPolicy())
        try:
            pkey = load_private_key(spec._private_key)
        except ValueError as exc:
            raise TransportError(f"the SSH key for {spec.username} cannot be used: {exc}") from None
        try:
            sock = socket.create_connection((spec.host, spec.port), timeout=spec.timeout)
            # paramiko leaves Nagle on: every exec on a reused connection would then cost ~47 ms, not ~3 ms.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError as exc:
            raise TransportError(f"cannot reach {spec.host}:{spec.port}: {exc.strerror or exc}") from None
        try:
            client.connect(
                spec.host,
                port=spec.port,
                username=spec.username,
                pkey=pkey,
                sock=sock,
                timeout=spec.timeout,
                banner_timeout=spec.timeout,
                auth_timeout=spec.timeout,
                allow_agent=False,
                look_for_keys=False,
            )
        except HostKeyMismatch:
            sock.close()
            raise
        except paramiko.BadHostKeyException as exc:
            sock.close()
            raise HostKeyMismatch(
                f"{spec.host}:{spec.port} presented a host key different from the pinned one "
                f"(got {fingerprint(exc.key)}): refusing to connect"
            ) from None
        except paramiko.AuthenticationException:
            sock.close()
            raise TransportError(
                f"the login node refused the key for {spec.username}: is the public key installed "
                f"in ~{spec.username}/.ssh/authorized_keys?"
            ) from None
        except (paramiko.SSHException, OSError) as exc:
            sock.close()
            raise TransportError(f"SSH to {spec.host}:{spec.port} failed: {exc}") from None
        transport = client.get_transport()
        if transport is not None:
            transport.set_keepalive(30)
        return client

    def _client(self) -> paramiko.SSHClient:
        with self.lock:
            if self.client is not None:
                t = self.client.get_transport()
                if t is not None and t.is_active():
                    return self.client
                self._drop()
            self.client = self._open()
            return self.client

    def _drop(self) -> None:
        if self.sftp is not None:
            with contextlib.suppress(Exception):  # closing a channel that may already be dead
                self.sftp.close()
        if self.client is not None:
            self.client.close()
        self.client = None
        self.sftp = None

    def close(self) -> None:
        with self.lock:
            self._drop()

    def _channel(self, open_one: Callable[[paramiko.Transport], paramiko.Channel]) -> paramiko.Channel:
        """A new channel of the pooled connection. A connection the login node closed behind our back is reopened
        once; only if no other thread (another channel of the same dispatch) reopened it meanwhile: dropping that
        one would fail its commands too."""
        for attempt in (1, 2):
            client = self._client()
            try:
                return open_one(client.get_transport())
            except (paramiko.SSHException, OSError, AttributeError, EOFError) as exc:
                with self.lock:
                    if self.client is client:
                        self._drop()
                if attempt == 2:
                    raise TransportError(f"SSH channel to {self.spec.host} failed: {exc}") from None
        raise AssertionError("unreachable")

    def exec(self, command: str, stdin: bytes | None, timeout: float) -> CommandResult:
        chan = self._channel(lambda transport: transport.open_session(timeout=timeout))
        return self._run(chan, command, stdin, timeout)

    def _run(self, chan: paramiko.Channel, command: str, stdin: bytes | None, timeout: float) -> CommandResult:
        deadline = time.monotonic() + timeout
        out, err = bytearray(), bytearray()
        try:
            chan.settimeout(timeout)
            chan.exec_command(command)
            if stdin:
                try:
                    chan.sendall(stdin)
                except OSError:
                    # The command ended before reading all of its input (a check that refused at once): its exit
                    # status and stderr below say why, not "Socket is closed".
                    if not chan.closed and not chan.exit_status_ready():
                        raise
            if not chan.closed:
                chan.shutdown_write()
            # The channel's fileno() is readable when stdout or stderr has data, or for good once EOF arrived:
            # select until EOF, then wait on the exit status itself (selecting again would only spin).
            def remaining() -> float:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TransportError(f"command on {self.spec.host} timed out after {timeout:.0f} s")
                return left

            while not chan.eof_received and not chan.closed:
                select.select([chan], [], [], min(remaining(), 1.0))
                while chan.recv_ready():
                    out += chan.recv(65536)
                while chan.recv_stderr_ready():
                    err += chan.recv_stderr(65536)
            while chan.recv_ready():
                out += chan.recv(65536)
            while chan.recv_stderr_ready():
                err += chan.recv_stderr(65536)
            while not chan.status_event.wait(min(remaining(), 1.0)):
                pass
            status = chan.recv_exit_status()
        except (paramiko.SSHException, OSError) as exc:
            raise TransportError(f"command on {self.spec.host} failed: {exc}") from None
        finally:
            chan.close()
        return CommandResult(status, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"))

    def open_stream(self, host: str, port: int, timeout: float) -> paramiko.Channel:
        def direct(transport: paramiko.Transport) -> paramiko.Channel:
            try:
                return transport.open_channel("direct-tcpip", (host, port), ("127.0.0.1", 0), timeout=timeout)
            except paramiko.ChannelException as exc:
                # The login node answered: it could not (or may not) connect there. Not the connection's fault.
                raise TransportError(f"the login node {self.spec.host} could not open {host}:{port}: "
                                     f"{exc.text or exc.code}") from None

        chan = self._channel(direct)
        chan.settimeout(None)
        return chan

    def read_file(self, path: str, offset: int, limit: int, timeout: float) -> bytes:
        for attempt in (1, 2):
            client = self._client()
            try:
                with self.sftp_lock:
                    if self.sftp is None:
                        self.sftp = client.open_sftp()
                        self.sftp.get_channel().settimeout(timeout)
                    try:
                        with self.sftp.open(path, "rb") as fh:
                            fh.seek(offset)
                            return fh.read(limit)
                    except FileNotFoundError:
                        return b""
            except (paramiko.SSHException, EOFError, OSError) as exc:
                with self.lock:
                    self._drop()
                if attempt == 2:
                    raise TransportError(f"reading {path} on {self.spec.host} failed: {exc}") from None
        raise AssertionError("unreachable")

    def _own_sftp(self, timeout: float) -> paramiko.SFTPClient:
        """A fresh SFTP session on the pooled connection, for one long transfer (it would otherwise hold the shared
        session, and every small read behind it, for as long as it runs)."""
        for attempt in (1, 2):
            client = self._client()
            try:
                sftp = client.open_sftp()
                sftp.get_channel().settimeout(timeout)
                return sftp
            except (paramiko.SSHException, EOFError, OSError) as exc:
                with self.lock:
                    self._drop()
                if attempt == 2:
                    raise TransportError(f"SFTP to {self.spec.host} failed: {exc}") from None
        raise AssertionError("unreachable")

    def write_stream(self, path: str, source: BinaryIO, chunk: int, timeout: float) -> int:
        sftp = self._own_sftp(timeout)
        written = 0
        try:
            with sftp.open(path, "wb") as fh:
                # Pipelined: requests go out without waiting for each reply (paramiko's own putfo does the same).
                fh.set_pipelined(True)
                while data := source.read(chunk):
                    fh.write(data)
                    written += len(data)
        except (paramiko.SSHException, EOFError, OSError) as exc:
            raise TransportError(f"writing {path} on {self.spec.host} failed after {written} bytes: {exc}") from None
        finally:
            sftp.close()
        return written

    def pipe(self, command: str, source: BinaryIO, timeout: float, heartbeat, stall: float,
             chunk: int, cancel: threading.Event | None = None) -> tuple[CommandResult, int]:
        """`command` on an exec channel of the pooled connection, `source` streamed as its stdin."""
        chan = self._channel(lambda transport: transport.open_session(timeout=self.spec.timeout))
        out, err = bytearray(), bytearray()
        try:
            chan.settimeout(None)
            chan.exec_command(command)
            feed = _Feed(source, chan.sendall, chan.shutdown_write, chan.close, chunk)

            def finished(wait: float) -> bool:
                select.select([chan], [], [], wait)
                while chan.recv_ready():
                    out.extend(chan.recv(65536))
                while chan.recv_stderr_ready():
                    err.extend(chan.recv_stderr(65536))
                return chan.eof_received and chan.exit_status_ready() or chan.closed

            feed.watch(finished, heartbeat, stall, timeout, chan.close, self.spec.host, cancel)
            while chan.recv_ready():
                out.extend(chan.recv(65536))
            while chan.recv_stderr_ready():
                err.extend(chan.recv_stderr(65536))
            if not chan.exit_status_ready():
                raise TransportError(f"the connection to {self.spec.host} closed before the command ended")
            status = chan.recv_exit_status()
        except (paramiko.SSHException, OSError) as exc:
            raise TransportError(f"streaming to {self.spec.host} failed: {exc}") from None
        finally:
            chan.close()
        return CommandResult(status, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")), feed.sent

    def read_stream(self, path: str, chunk: int, timeout: float) -> Iterator[bytes]:
        sftp = self._own_sftp(timeout)
        try:
            with sftp.open(path, "rb") as fh:
                size = fh.stat().st_size
                offset = 0
                while offset < size:
                    # readv pipelines the requests of one window: SFTP speed with at most `chunk` bytes in memory.
                    length = min(chunk, size - offset)
                    yield b"".join(fh.readv([(offset, length)]))
                    offset += length
        except (paramiko.SSHException, EOFError, OSError) as exc:
            raise TransportError(f"reading {path} on {self.spec.host} failed: {exc}") from None
        finally:
            sftp.close()
