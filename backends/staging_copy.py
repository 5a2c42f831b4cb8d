"""How staged bytes travel to the login node (docs/decisions/0041): one stream per large file, one tar stream for
many small ones, each checked by SHA-256 on the login node before it takes its content's name in the cache.

- A large file (LARGE_FILE or more) is streamed to `tee <tmp> | openssl dgst -sha256` on one `Transport.pipe`
  (OpenSSH's client where installed: about twice paramiko's speed): the login node hashes the bytes as they arrive
  and the file is renamed to `<cache>/<sha256>` only if the digest and the size match.
- Smaller files go many at once into one tar stream (`tar -x` into a fresh incoming directory inside the cache):
  10,000 files cost one connection and one command, not 10,000 SFTP opens and 10,000 commands. Their bytes are
  fetched from the object store by a few threads ahead of the stream, in order, with at most WINDOW_BYTES
  waiting in memory. The members are named by their SHA-256 only (hex: nothing a dataset's author typed reaches
  tar or a shell); on the login node every member is hashed (`openssl dgst`, `sha256sum` where there is no
  openssl), those whose digest is their name are moved into the cache, the others removed and reported.

Either way a cache entry is whole and right whatever crashed half-way (a temporary name until verified), and a
stream that fails or stalls leaves no temporary file behind where the login node can still be told so.

Why one module: the two ways share the prefetching reader, the login node's checks, the refusal and the cleanup;
read together, they say every way a staged byte can travel.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import select
import shlex
import tarfile
import threading
import time
import urllib.parse
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from backends.spec import BackendError, DataFile, DataRefused
from backends.transport import Transport

# Files at least this large travel alone, hashed as they arrive; smaller ones in a tar stream with others.
LARGE_FILE = 64 << 20
# A tar stream's files are fetched whole (in parallel) below this size; larger ones are streamed in order.
FETCH_WHOLE = 4 << 20
FETCH_THREADS = 16
# The most bytes fetched ahead of a tar stream and waiting in memory.
WINDOW_BYTES = 32 << 20
CHUNK = 1 << 20
# A stream from which no byte moved for this long is given up (retryable); until then the lease is renewed.
STALL_SECONDS = 300.0
# The login node's Python 3 (a one-pass writer and hasher); where `command -v` does not find it, shell tools do the
# same in more passes.
PYTHON = "python3"
# Hash a file's SHA-256 on the login node: OpenSSL uses the CPU's SHA instructions (4x coreutils' sha256sum).
HASHER = "if command -v openssl >/dev/null 2>&1; then H='openssl dgst -sha256 -r'; else H='sha256sum --'; fi"


def _mismatch(f: DataFile, got: str, size: str, sent: int | None = None) -> DataRefused:
    what = f" ({sent} sent)" if sent is not None else ""
    return DataRefused(
        f"{f.path or 'the file'} arrived on the cluster with SHA-256 {got[:16]}… and {size or '?'} bytes, but the "
        f"object store recorded {f.sha256[:16]}… and {f.size} bytes{what}: the stored copy does not match its "
        "checksum; upload it again")


def _quoted(path: str) -> str:
    """A path on the cluster as one shell word, relative ones from the directory commands start in."""
    return shlex.quote(path) if path.startswith("/") else '"$PWD"/' + shlex.quote(path)


def _umask(group: str) -> str:
    # A private cache is the account's alone; a shared one its group's (files made read-only once verified).
    return "umask 007" if group else "umask 077"


class Prefetched:
    """Reads `source` in a thread a few chunks ahead, so fetching from the object store and writing to the cluster
    overlap; at most `depth` chunks wait in memory."""

    def __init__(self, source, chunk: int = CHUNK, depth: int = 8) -> None:
        import queue

        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._full = queue.Full
        self._rest = b""
        self._done = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._fill, args=(source, chunk), daemon=True)
        self._thread.start()

    def _fill(self, source, chunk: int) -> None:
        try:
            while not self._stop.is_set():
                data = source.read(chunk)
                self._put(data)
                if not data:
                    return
        except BaseException as exc:  # noqa: BLE001 - handed to the reader, raised there
            self._put(exc)

    def _put(self, item) -> None:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.5)
                return
            except self._full:
                continue

    def read(self, size: int = -1) -> bytes:
        while not self._rest and not self._done:
            item = self._queue.get()
            if isinstance(item, BaseException):
                self._stop.set()
                raise item
            if not item:
                self._done = True
            self._rest = item
        if size < 0 or size >= len(self._rest):
            data, self._rest = self._rest, b""
        else:
            data, self._rest = self._rest[:size], self._rest[size:]
        return data

    def close(self) -> None:
        self._stop.set()


class HTTPBody:
    """The body of a GET of a presigned URL, read like a file, or moved into a pipe by splice(2) where the store
    speaks plain HTTP: then no byte of a large file passes through the worker's Python (the relay's CPU)."""

    def __init__(self, url: str, timeout: float = 60.0, byte_range: tuple[int, int] | None = None) -> None:
        parts = urllib.parse.urlsplit(url)
        kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        self._conn = kind(parts.netloc, timeout=timeout)
        self._timeout, self._plain = timeout, parts.scheme == "http" and hasattr(os, "splice")
        # `byte_range`: bytes [start, end) only (members of a pack); the store answers 206 with exactly those.
        headers = {"Range": f"bytes={byte_range[0]}-{byte_range[1] - 1}"} if byte_range else {}
        self._conn.request("GET", parts.path + (f"?{parts.query}" if parts.query else ""), headers=headers)
        self._response = self._conn.getresponse()
        if self._response.status != (206 if byte_range else 200):
            text = self._response.read(300).decode("utf-8", "replace")
            self._conn.close()
            raise OSError(f"the object store answered {self._response.status}: {text}")
        self.left = self._response.length or 0
        if byte_range and self.left != byte_range[1] - byte_range[0]:
            self._conn.close()
            raise OSError(f"the object store sent {self.left} bytes for a range of {byte_range[1] - byte_range[0]}")

    def read(self, size: int = -1) -> bytes:
        data = self._response.read(size if size and size > 0 else None)
        self.left -= len(data)
        return data

    def splice_into(self, fd: int, moved: Callable[[int], None]) -> None:
        if not self._plain:  # HTTPS: the bytes are decrypted in Python, a chunk at a time
            while data := self.read(CHUNK):
                _write_all(fd, data)
                moved(len(data))
            return
        # What http.client's reader already holds of the body goes first, then the socket straight into the pipe.
        held = self._response.fp.peek(1)[:self.left] if self.left else b""
        if held:
            data = self._response.fp.read(len(held))
            _write_all(fd, data)
            self.left -= len(data)
            moved(len(data))
        # The response's own socket: a store that answers HTTP/1.0 or "Connection: close" hands it to the
        # response, and the connection forgets it (`_conn.sock` is None then).
        sock = self._response.fp.fileno()
        while self.left > 0:
            try:
                n = os.splice(sock, fd, min(self.left, 1 << 20))
            except BlockingIOError:  # the socket has a timeout, so it is non-blocking underneath
                if not select.select([sock], [], [], self._timeout)[0]:
                    raise TimeoutError(f"the object store sent nothing for {self._timeout:.0f} s") from None
                continue
            if n == 0:
                raise OSError(f"the object store closed the connection with {self.left} bytes still to send")
            self.left -= n
            moved(n)

    def close(self) -> None:
        self._conn.close()


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _closing(source) -> None:
    close = getattr(source, "close", None)
    if close:
        with contextlib.suppress(Exception):
            close()


# One stream of one file: the login node's python3 reads it, hashes it and writes it in one pass (one process,
# two copies of each byte); where there is no python3, `tee | openssl dgst` does the same with three processes.
WRITER = r"""
import hashlib, os, sys
digest, buffer = hashlib.sha256(), bytearray(1 << 20)
view, source = memoryview(buffer), sys.stdin.buffer.raw
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
while True:
    n = source.readinto(buffer)
    if not n:
        break
    digest.update(view[:n])
    done = 0
    while done < n:
        done += os.write(fd, view[done:n])
os.close(fd)
print(digest.hexdigest())
"""
# Several streams for one file (`streams`, the cluster option ssh_streams): OpenSSH encrypts each connection on one
# core, so a file split in ranges moves on as many cores at both ends where they are idle; where they are not, the
# second pass that hashes the joined file costs more than it saves (bench/README.md): one stream by default.
# Ranges are whole MiB (dd's blocks).
STREAMS = 1
PARALLEL_MIN = 256 << 20


def _verify_and_name(tmp: str, final: str, f: DataFile, group: str, digest: str) -> str:
    """Shell that renames `tmp` to `final` if `digest` (a shell expression) and its size are the file's, else
    removes it and prints what arrived (exit 3)."""
    # In a shared cache the file is the group's and read-only before it takes its name: whoever sees it may read
    # it, and no job writes through its link into what the others read.
    share = f"chgrp -- {shlex.quote(group)} {tmp} && chmod 0440 -- {tmp} && " if group else ""
    return (f"got={digest}; size=$(stat -c %s -- {tmp}); "
            f"if [ \"$got\" = {f.sha256} ] && [ \"$size\" = {int(f.size)} ]; then {share}mv -f -- {tmp} {final}; "
            f"else rm -f -- {tmp}; printf '%s %s\\n' \"$got\" \"$size\"; exit 3; fi")


def copy_large(transport: Transport, cache: str, f: DataFile, group: str,
               heartbeat: Callable[[], None] | None, streams: int = 0) -> None:
    """One file streamed to the login node and renamed into the cache once its SHA-256 there is right: hashed as it
    arrives on one stream, or, split over several streams (ranges of the object), hashed once all have landed."""
    streams = streams or STREAMS
    temporary = f"{cache}/{f.sha256}.part-{uuid.uuid4().hex[:12]}"
    tmp, final = _quoted(temporary), _quoted(f"{cache}/{f.sha256}")
    try:
        if streams > 1 and f.open_range is not None and f.size >= PARALLEL_MIN:
            result = _copy_ranges(transport, tmp, final, f, group, heartbeat, streams)
        else:
            write = (f"if command -v {PYTHON} >/dev/null 2>&1; then got=$({PYTHON} -c {shlex.quote(WRITER)} {tmp}); "
                     f"else got=$(tee -- {tmp} | $H | cut -d ' ' -f 1); fi || {{ rm -f -- {tmp}; exit 5; }}")
            command = (f"set -o pipefail; {_umask(group)}; {HASHER}; {write}; "
                       + _verify_and_name(tmp, final, f, group, '"$got"'))
            # By a presigned GET where there is one (spliced into the pipe to ssh: no byte through Python), else
            # the store's stream read a few chunks ahead.
            source = HTTPBody(f.get_url()) if f.get_url is not None else f.open()
            reader = source if f.get_url is not None else Prefetched(source)
            try:
                result = transport.pipe(command, reader, heartbeat=heartbeat, stall=STALL_SECONDS,
                                        timeout=max(60.0, f.size / 50e6))
            finally:
                if reader is not source:
                    reader.close()
                _closing(source)
    except BaseException:
        # A copy cut short leaves no stray part file behind, where the cluster can still be told so.
        with contextlib.suppress(Exception):
            transport.run_shell(f"rm -f -- {tmp}", timeout=30)
        raise
    if result.exit_status == 3:
        got, _, size = result.stdout.strip().partition(" ")
        raise _mismatch(f, got, size)
    if result.exit_status != 0:
        raise BackendError(f"copying {f.path or 'a file'} to the cluster failed: {result.message}")


def _copy_ranges(transport: Transport, tmp: str, final: str, f: DataFile, group: str,
                 heartbeat: Callable[[], None] | None, streams: int):
    """`streams` ranges of the object, each on a stream of its own into its place in `tmp` (dd at its offset);
    then the whole file hashed on the login node. The caller's thread waits and beats; a stream that fails cuts
    the others."""
    from concurrent.futures import FIRST_EXCEPTION, wait

    mib = 1 << 20
    step = -(-f.size // streams // mib) * mib
    ranges = [(start, min(start + step, f.size)) for start in range(0, f.size, step)]
    made = transport.run_shell(f"{_umask(group)}; : > {tmp}", timeout=60)
    if not made.ok:
        raise BackendError(f"cannot make {tmp} on the cluster: {made.message}")
    cancel = threading.Event()

    def send(start: int, end: int):
        source = f.open_range(start, end)
        reader = Prefetched(source)
        try:
            return transport.pipe(f"dd of={tmp} bs=1M seek={start // mib} conv=notrunc iflag=fullblock status=none",
                                  reader, stall=STALL_SECONDS, timeout=120, cancel=cancel)
        finally:
            reader.close()
            _closing(source)

    from backends import transport as transport_module

    with ThreadPoolExecutor(len(ranges), thread_name_prefix="kakehashi-range") as pool:
        futures = [pool.submit(send, start, end) for start, end in ranges]
        try:
            while True:
                done, pending = wait(futures, timeout=transport_module.HEARTBEAT_EVERY, return_when=FIRST_EXCEPTION)
                if not pending or any(fut.exception() for fut in done):
                    break
                if heartbeat is not None:
                    heartbeat()
        finally:
            if any(not fut.done() for fut in futures):
                cancel.set()  # one failed (or the caller's heartbeat did): the others stop too
        for fut in futures:
            answer = fut.result()
            if not answer.ok:
                raise BackendError(f"writing part of {f.path or 'a file'} on the cluster failed: {answer.message}")
    command = (f"set -o pipefail; {_umask(group)}; {HASHER}; "
               + _verify_and_name(tmp, final, f, group, f"$($H {tmp} | cut -d ' ' -f 1)"))
    return transport.run_shell(command, timeout=max(60.0, f.size / 50e6))


class TarStream:
    """The bytes of a tar archive of `files`, each member named by its SHA-256, read like a file.

    Small files are fetched whole by FETCH_THREADS threads ahead of the reader (in order; at most WINDOW_BYTES
    waiting); a larger one is streamed from its source when its turn comes.

    The same bytes are a pack (portal/storage/packs.py) when `archive_end` is False: members only, no end-of-archive
    blocks, so runs of members from several packs joined together are one archive again. `members` then says,
    once read to the end, where each member starts and whether its bytes were the SHA-256 it is named by."""

    def __init__(self, files: Sequence[DataFile], *, threads: int = FETCH_THREADS,
                 window: int = WINDOW_BYTES, archive_end: bool = True, check: bool = False) -> None:
        self._files, self._window, self._end, self._check = list(files), window, archive_end, check
        # (sha256, offset of its header, size, intact) of each member written so far; `check`: whether its bytes
        # are its SHA-256 is found out here (a pack's), else the login node finds out (intact is then True).
        self.members: list[tuple[str, int, int, bool]] = []
        self._offset = 0
        self._pool = ThreadPoolExecutor(max(1, threads), thread_name_prefix="kakehashi-fetch")
        self._pending: deque[tuple[DataFile, Future | None]] = deque()
        self._waiting = 0  # bytes fetched or being fetched ahead
        self._next = 0
        self._parts: Iterator[bytes] = self._generate()
        self._rest = b""

    _local = threading.local()

    @classmethod
    def _fetch(cls, f: DataFile) -> bytes:
        if f.get_url is not None:
            return cls._get(f)
        source = f.open()
        try:
            data = bytearray()
            while chunk := source.read(CHUNK):
                data += chunk
            return bytes(data)
        finally:
            _closing(source)

    @classmethod
    def _get(cls, f: DataFile) -> bytes:
        """A small object by a presigned GET on this thread's kept-alive connection: a third of boto3's cost per
        request (signing and parsing in Python), which is what 10,000 small files are made of."""
        url = urllib.parse.urlsplit(f.get_url())
        last: Exception | None = None
        for attempt in range(3):
            local = cls._local
            if getattr(local, "where", None) != (url.scheme, url.netloc):
                kind = http.client.HTTPSConnection if url.scheme == "https" else http.client.HTTPConnection
                local.conn, local.where = kind(url.netloc, timeout=60), (url.scheme, url.netloc)
            try:
                local.conn.request("GET", url.path + (f"?{url.query}" if url.query else ""))
                answer = local.conn.getresponse()
                data = answer.read()
                if answer.status == 200:
                    return data
                last = OSError(f"the object store answered {answer.status} for {f.path or f.sha256[:16]}: "
                               f"{data[:200].decode('utf-8', 'replace')}")
                if answer.status < 500:
                    break
            except (OSError, http.client.HTTPException) as exc:
                last = exc
                local.conn.close()
                local.where = None
            time.sleep(0.5 * (attempt + 1))
        raise last

    def _fill(self) -> None:
        while self._next < len(self._files):
            f = self._files[self._next]
            whole = f.size < FETCH_WHOLE
            if whole and self._pending and self._waiting + f.size > self._window:
                return
            self._pending.append((f, self._pool.submit(self._fetch, f) if whole else None))
            self._waiting += f.size if whole else 0
            self._next += 1
            if not whole:
                return  # a streamed file: nothing after it is fetched until it has passed

    def _generate(self) -> Iterator[bytes]:
        import hashlib

        self._fill()
        while self._pending:
            f, future = self._pending.popleft()
            info = tarfile.TarInfo(f.sha256)
            info.size, info.mode, info.mtime = f.size, 0o600, 0
            header = info.tobuf(format=tarfile.USTAR_FORMAT)
            start, self._offset = self._offset, self._offset + member_size(f.size)
            yield header
            sent, digest = 0, hashlib.sha256() if self._check else None
            if future is not None:
                data = future.result()
                self._waiting -= f.size
                self._fill()
                sent = min(len(data), f.size)
                if digest:
                    digest.update(data[:f.size])
                yield data[:f.size]
            else:
                source = f.open()
                reader = Prefetched(source)
                try:
                    while sent < f.size and (data := reader.read(min(CHUNK, f.size - sent))):
                        sent += len(data)
                        if digest:
                            digest.update(data)
                        yield data
                finally:
                    reader.close()
                    _closing(source)
                self._fill()
            self.members.append((f.sha256, start, f.size,
                                 sent == f.size and (digest is None or digest.hexdigest() == f.sha256)))
            while sent < f.size:
                # The store gave fewer bytes than it recorded: the tar header promised f.size, so the archive stays
                # well-formed and the login node's checksum says the file is not what the store recorded.
                pad = min(CHUNK, f.size - sent)
                sent += pad
                yield bytes(pad)
            if f.size % 512:
                yield bytes(512 - f.size % 512)
        if self._end:
            yield bytes(1024)

    def read(self, size: int = -1) -> bytes:
        while not self._rest:
            part = next(self._parts, None)
            if part is None:
                return b""
            self._rest = part
        if size < 0 or size >= len(self._rest):
            data, self._rest = self._rest, b""
        else:
            data, self._rest = self._rest[:size], self._rest[size:]
        return data

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def member_size(size: int) -> int:
    """The bytes a file of `size` takes in a tar stream: a 512-byte header, its bytes, zeros to the next 512."""
    return 512 + -(-size // 512) * 512


# The login node's side of a tar stream where it has python3: each member written, hashed in the same pass and
# renamed to its SHA-256 if that is its name (one process, no second pass over the files). Without python3: `tar -x`
# into a directory of its own, then `openssl dgst` over what it unpacked, then `mv`. Runs in the cache directory,
# reading the stream on stdin; argv: the group sharing the cache ("" for none) and this stream's token. It reads the
# headers itself (tarfile's stream mode took 40 % longer for 10,000 files): only what the worker writes is taken,
# a regular file named by 64 hex digits under a header whose checksum is right; anything else ends the stream.
RECEIVER = r"""
import hashlib, os, re, sys
group, token = sys.argv[1], sys.argv[2]
gid = __import__("grp").getgrnam(group).gr_gid if group else -1
hexname, zeros = re.compile(r"[0-9a-f]{64}\Z"), bytes(512)
source, buffer = sys.stdin.buffer, bytearray(1 << 20)
view = memoryview(buffer)


def fill(n):
    got = 0
    while got < n:
        k = source.readinto(view[got:n])
        if not k:
            sys.exit("the stream ended inside a member")
        got += k


while True:
    header = source.read(512)
    if len(header) < 512:
        sys.exit("the stream ended inside a header")
    if header == zeros:
        break
    name = header[:100].split(b"\0", 1)[0].decode("ascii", "replace")
    try:
        size = int(header[124:136].split(b"\0", 1)[0].strip() or b"0", 8)
        checksum = int(header[148:156].split(b"\0", 1)[0].strip() or b"-1", 8)
    except ValueError:
        sys.exit("a member's header is not a tar header")
    if checksum != sum(header[:148]) + 256 + sum(header[156:]):
        sys.exit("a member's header is damaged (its checksum)")
    if header[156:157] not in (b"0", b"\0") or not hexname.match(name):
        sys.exit("not a file named by its SHA-256 in the stream: %r" % name[:80])
    tmp, digest, left = "%s.part-%s" % (name, token), hashlib.sha256(), size
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        while left:
            n = min(left, len(buffer))
            fill(n)
            digest.update(view[:n])
            done = 0
            while done < n:
                done += os.write(fd, view[done:n])
            left -= n
    finally:
        os.close(fd)
    if size % 512:
        fill(512 - size % 512)
    got = digest.hexdigest()
    if got != name:
        os.unlink(tmp)
        print("bad", name, got)
        continue
    if group:
        os.chown(tmp, -1, gid)
        os.chmod(tmp, 0o440)
    os.rename(tmp, name)
    print("ok", name)
"""


def _receiving(cache: str, group: str, token: str) -> str:
    """The login node's command that takes a tar stream of members named by SHA-256 into the cache: each written,
    hashed and renamed to its name if that is its SHA-256; prints `ok <sha>` or `bad <sha> <got>` per member."""
    share = (f"xargs -r chgrp -- {shlex.quote(group)} < \"$in.ok\" && xargs -r chmod 0440 -- < \"$in.ok\" && "
             if group else "")
    # `ls` lists only what tar made there: names of 64 hex digits, nothing else can be in a directory made here.
    unpack = "\n".join([
        f'in="$PWD"/.incoming-{token}',  # in the cache (the command is there)
        'mkdir -- "$in" || exit 5',
        'tar -x -f - -C "$in" --no-same-owner || { rm -rf -- "$in"; echo "tar could not unpack the stream" >&2; exit 5; }',
        'cd -- "$in" || exit 5',
        """ls -1 | xargs -r $H | """
        """awk -v ok="$in.ok" '{n=$2; sub(/^\\*/, "", n); if ($1 == n) print n > ok; else print "bad", n, $1}'""",
        'touch -- "$in.ok"',
        f'{share}xargs -r mv -f -t .. -- < "$in.ok" || {{ rm -rf -- "$in" "$in.ok"; exit 5; }}',
        'sed "s/^/ok /" "$in.ok"; cd .. && rm -rf -- "$in" "$in.ok"',
    ])
    return "\n".join([
        f"set -o pipefail; {_umask(group)}; {HASHER}",
        f"cd -- {_quoted(cache)} || exit 5",
        f"if command -v {PYTHON} >/dev/null 2>&1; then",
        f"{PYTHON} -c {shlex.quote(RECEIVER)} {shlex.quote(group)} {token}",
        "else",
        unpack,
        "fi",
    ])


def _receive(transport: Transport, cache: str, group: str, stream, files: Sequence[DataFile],
             heartbeat: Callable[[], None] | None) -> tuple[set[str], dict[str, str]]:
    """`stream` (a tar stream of `files`' members) into the cache: (the SHA-256s that took their names there, those
    that arrived as other bytes -> what they hashed to). A stream that fails leaves no part file behind."""
    token = uuid.uuid4().hex[:12]
    incoming = _quoted(f"{cache}/.incoming-{token}")
    try:
        result = transport.pipe(_receiving(cache, group, token), stream, heartbeat=heartbeat, stall=STALL_SECONDS,
                                timeout=max(60.0, sum(f.size for f in files) / 50e6))
    except BaseException:
        with contextlib.suppress(Exception):
            transport.run_shell(f"rm -rf -- {incoming} {incoming}.ok; cd -- {_quoted(cache)} && "
                                f"rm -f -- *.part-{token}", timeout=30)
        raise
    if result.exit_status != 0:
        with contextlib.suppress(Exception):
            transport.run_shell(f"cd -- {_quoted(cache)} && rm -f -- *.part-{token}", timeout=30)
        raise BackendError(f"copying {len(files)} files to the cluster failed: {result.message}")
    moved, bad = set(), {}
    for line in result.stdout.splitlines():
        word, _, rest = line.partition(" ")
        if word == "ok":
            moved.add(rest.strip())
        elif word == "bad":
            name, _, got = rest.partition(" ")
            bad[name] = got.strip()
    return moved, bad


def copy_batch(transport: Transport, cache: str, files: Sequence[DataFile], group: str,
               heartbeat: Callable[[], None] | None) -> None:
    """Many files in one tar stream into the cache, each taking its name once its SHA-256 there is that name;
    DataRefused naming those whose bytes are not what the store recorded."""
    if not files:
        return
    stream = TarStream(files)
    try:
        moved, bad = _receive(transport, cache, group, stream, files, heartbeat)
    finally:
        stream.close()
    by_sha = {f.sha256: f for f in files}
    if bad:
        sha = sorted(bad)[0]
        more = f" (and {len(bad) - 1} other file(s))" if len(bad) > 1 else ""
        refusal = _mismatch(by_sha[sha], bad[sha], "") if sha in by_sha else DataRefused(f"{sha} arrived damaged")
        raise DataRefused(f"{refusal}{more}")
    missing = [sha for sha in by_sha if sha not in moved]
    if missing:
        raise BackendError(f"{len(missing)} of {len(files)} files did not arrive in the cluster's cache "
                           f"({by_sha[missing[0]].path or missing[0][:16]}…)")


# ---------------------------------------------------------------- from packs: a few GETs for many small files

# A pack is read in runs of members that follow each other (one ranged GET each, one after the other): past this
# many runs in one pack (a cache that already holds every other file), the files' own GETs, 16 at once, are faster.
PACK_RUNS_MAX = 32


def from_packs(files: Sequence[DataFile]) -> tuple[list[DataFile], list[DataFile]]:
    """(the files to read from their packs, in pack and offset order; the rest): a pack read in at most
    PACK_RUNS_MAX runs is worth it."""
    by_pack: dict[str, list[DataFile]] = {}
    rest = []
    for f in files:
        if f.packed is not None:
            by_pack.setdefault(f.packed.pack, []).append(f)
        else:
            rest.append(f)
    usable = []
    for pack in sorted(by_pack):
        members = sorted(by_pack[pack], key=lambda f: f.packed.offset)
        if len(_runs(members)) <= PACK_RUNS_MAX:
            usable += members
        else:
            rest += members
    return usable, rest


def _runs(members: Sequence[DataFile]) -> list[tuple[Callable[[], str], int, int]]:
    """(presigned GET, start, end) of each run of members that follow each other in one pack, in order."""
    runs: list[list] = []
    for f in members:
        start, end = f.packed.offset, f.packed.offset + member_size(f.size)
        last = runs[-1] if runs else None
        if last is not None and last[3] == f.packed.pack and last[2] == start:
            last[2] = end
        else:
            runs.append([f.packed.get_url, start, end, f.packed.pack])
    return [(get_url, start, end) for get_url, start, end, _ in runs]


class PackUnreadable(Exception):
    """A pack's range could not be read from the store (deleted since, refused, cut off). Not an OSError: the
    transports take those for their own failures; this one only sends the pack's files their own way."""


class PackedStream:
    """A tar stream made of runs of pack members (each a ranged GET of its pack, in order) and the archive's end:
    the bytes go from the store to the login node as they are, spliced where the store speaks plain HTTP."""

    def __init__(self, runs: Sequence[tuple[Callable[[], str], int, int]]) -> None:
        self._runs, self._next, self._body = list(runs), 0, None
        self._tail = bytes(1024)

    @staticmethod
    def _open(get_url: Callable[[], str], start: int, end: int) -> HTTPBody:
        try:
            return HTTPBody(get_url(), byte_range=(start, end))
        except (OSError, http.client.HTTPException) as exc:
            raise PackUnreadable(str(exc)) from exc

    def read(self, size: int = -1) -> bytes:
        size = size if size and size > 0 else CHUNK
        while True:
            if self._body is None:
                if self._next == len(self._runs):
                    data, self._tail = self._tail[:size], self._tail[size:]
                    return data
                self._body = self._open(*self._runs[self._next])
                self._next += 1
            if self._body.left > 0:
                try:
                    data = self._body.read(min(size, self._body.left))
                except (OSError, http.client.HTTPException) as exc:
                    raise PackUnreadable(str(exc)) from exc
                if not data:
                    raise PackUnreadable(f"the object store closed a pack's range with {self._body.left} bytes to send")
                return data
            self._body.close()
            self._body = None

    def splice_into(self, fd: int, moved: Callable[[int], None]) -> None:
        for run in self._runs:
            body = self._open(*run)
            try:
                body.splice_into(fd, moved)
            except BrokenPipeError:
                raise  # the login node's command ended first: its exit status says why
            except (OSError, http.client.HTTPException) as exc:
                raise PackUnreadable(str(exc)) from exc
            finally:
                body.close()
        _write_all(fd, self._tail)
        moved(len(self._tail))

    def close(self) -> None:
        if self._body is not None:
            self._body.close()


def copy_packed(transport: Transport, cache: str, files: Sequence[DataFile], group: str,
                heartbeat: Callable[[], None] | None) -> list[DataFile]:
    """Files read from their packs (`from_packs` order) into the cache in one tar stream, each checked on the login
    node as `copy_batch` checks them. Returns those that did not arrive whole (a pack gone, damaged, or not what
    its rows say): the caller sends them again from their own objects, which say the truth about their bytes."""
    if not files:
        return []
    stream = PackedStream(_runs(files))
    try:
        moved, _ = _receive(transport, cache, group, stream, files, heartbeat)
    except (PackUnreadable, BackendError):
        # The pack could not be read whole (deleted since, the store refused a range) or the command failed on the
        # login node: nothing is lost, each file goes its own way. The SSH connection failing is not this: a
        # TransportError is not caught here and the dispatch is retried.
        return list(files)
    finally:
        stream.close()
    return [f for f in files if f.sha256 not in moved]
