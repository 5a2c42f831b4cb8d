"""Direct pull: the login node fetches a dataset's objects from the store itself, so the worker relays no byte
(cluster option `data_pull: "presigned"`, docs/decisions/0042).

The worker signs a short-lived GET for each missing object and hands the list to a small Python program run on
the login node (Python 3's standard library only: it is on every login node this project has met; where it is
not, staging falls back to relaying). The URLs travel on the command's stdin, never in its argv: a presigned URL
is a bearer credential for its object, and argv is readable by every account on a login node.

On the login node, per file: ranges of RANGE_BYTES fetched by THREADS threads in parallel (`Range` GETs on kept
connections) into a temporary file in the cache, written at their offsets; a hashing thread follows the ranges
in order as they complete (so the SHA-256 is ready when the last byte lands); the file is renamed to
`<cache>/<sha256>` only if digest and size match, exactly as a relayed copy. Small files are fetched whole,
4 × THREADS at once. Each file's outcome is one line on stdout: `ok SHA`, `bad SHA GOT SIZE` (the store's bytes are not what
it recorded: the job is refused), `err SHA REASON` (the store could not be reached from there: relayed instead).
"""

from __future__ import annotations

import contextlib
import io
import json
import shlex
import uuid
from collections.abc import Callable, Sequence

from backends import staging_copy
from backends.spec import BackendError, DataFile
from backends.staging_copy import _mismatch, _quoted, _umask
from backends.transport import Transport

PULL_VALUE = "presigned"
THREADS = 4
RANGE_BYTES = 16 << 20
# The login node's status when python3 is missing there: staging relays the bytes instead.
NO_PYTHON = 7

# Runs on the login node as the researcher (python3 -c), in the cache directory. Reads {"group", "token", "threads",
# "range", "files": [{sha256, size, url}]} from stdin. Writes nothing but `<sha256>.part-<token>` (removed unless
# renamed) and `<sha256>` there.
PROGRAM = r'''
import hashlib, http.client, json, os, sys, threading, time, urllib.parse
from concurrent.futures import ThreadPoolExecutor
job = json.load(sys.stdin)
folder, group, token = os.getcwd(), job["group"], job["token"]
THREADS, RANGE = job["threads"], job["range"]
lock, local = threading.Lock(), threading.local()

def say(*words):
    with lock:
        print(*words, flush=True)

def connection(url):
    # One kept-alive connection per thread and store: a range costs no new TCP (or TLS) handshake.
    where = (url.scheme, url.netloc)
    if getattr(local, "where", None) != where:
        if getattr(local, "conn", None) is not None:
            local.conn.close()
        kind = http.client.HTTPSConnection if url.scheme == "https" else http.client.HTTPConnection
        local.conn, local.where = kind(url.netloc, timeout=120), where
        local.buffer = bytearray(1 << 20)
    return local.conn

def fetch(url, start, end, fd, done):
    last = None
    for attempt in range(4):
        try:
            conn = connection(url)
            conn.request("GET", url.path + ("?" + url.query if url.query else ""),
                         headers={"Range": "bytes=%d-%d" % (start, end - 1)})
            answer = conn.getresponse()
            if answer.status != 206 and not (answer.status == 200 and start == 0 and answer.length == end):
                text = answer.read(300).decode("utf-8", "replace").replace("\n", " ")
                raise OSError("the store answered %d: %s" % (answer.status, text))
            view, offset = memoryview(local.buffer), start
            while offset < end:
                n = answer.readinto(view[:min(len(view), end - offset)])
                if not n:
                    raise OSError("the store sent %d of %d bytes" % (offset - start, end - start))
                written = 0
                while written < n:
                    written += os.pwrite(fd, view[written:n], offset + written)
                offset += n
            done.set()
            return
        except (OSError, http.client.HTTPException) as exc:
            last = exc
            local.conn.close()
            local.where = None
            time.sleep(min(2 ** attempt, 8) * 0.25)
    raise last

def pull(item, pool):
    sha, size, url = item["sha256"], item["size"], urllib.parse.urlsplit(item["url"])
    tmp = os.path.join(folder, "%s.part-%s" % (sha, token))
    final = os.path.join(folder, sha)
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        ranges = [(s, min(s + RANGE, size)) for s in range(0, size, RANGE)]
        events = [threading.Event() for _ in ranges]
        futures = [pool.submit(fetch, url, s, e, fd, ev) for (s, e), ev in zip(ranges, events)]
        # The hash follows the ranges in order as they land (read back from the page cache).
        digest, buffer = hashlib.sha256(), bytearray(4 << 20)
        view = memoryview(buffer)
        for (s, e), ev, fut in zip(ranges, events, futures):
            while not ev.wait(1):
                if fut.done() and fut.exception():
                    raise fut.exception()
            offset = s
            while offset < e:
                n = os.preadv(fd, [view[:min(len(view), e - offset)]], offset)
                digest.update(view[:n])
                offset += n
        for fut in futures:
            fut.result()
        os.close(fd)
        fd = -1
        got, have = digest.hexdigest(), os.stat(tmp).st_size
        if got != sha or have != size:
            os.unlink(tmp)
            say("bad", sha, got, have)
            return
        if group:
            os.chown(tmp, -1, __import__("grp").getgrnam(group).gr_gid)
            os.chmod(tmp, 0o440)
        os.rename(tmp, final)
        say("ok", sha)
    except Exception as exc:
        if fd >= 0:
            os.close(fd)
        if os.path.exists(tmp):
            os.unlink(tmp)
        say("err", sha, (type(exc).__name__ + ": " + str(exc)).replace("\n", " ")[:300])

small = [f for f in job["files"] if f["size"] <= RANGE]
large = [f for f in job["files"] if f["size"] > RANGE]
with ThreadPoolExecutor(THREADS) as ranges:
    for item in large:
        pull(item, ranges)
    with ThreadPoolExecutor(THREADS * 4) as files:
        list(files.map(lambda item: pull(item, ranges), small))
'''


def pull(transport: Transport, cache: str, files: Sequence[DataFile], group: str,
         heartbeat: Callable[[], None] | None) -> list[DataFile]:
    """Have the login node fetch `files` into the cache itself. Returns the files it could not reach the store for
    (to be relayed); DataRefused for one whose bytes are not what the store recorded."""
    if not files:
        return []
    by_sha = {f.sha256: f for f in files}
    job = {"group": group, "token": uuid.uuid4().hex[:12], "threads": THREADS, "range": RANGE_BYTES,
           "files": [{"sha256": f.sha256, "size": f.size, "url": f.presign()} for f in files]}
    python = staging_copy.PYTHON
    command = (f"{_umask(group)}; command -v {python} >/dev/null 2>&1 || exit {NO_PYTHON}; "
               f"cd -- {_quoted(cache)} && {python} -c {shlex.quote(PROGRAM)}")
    stdin = io.BytesIO(json.dumps(job).encode())
    total = sum(f.size for f in files)
    try:
        result = transport.pipe(command, stdin, heartbeat=heartbeat, timeout=120 + total / 10e6, counted=False)
    except BaseException:
        with contextlib.suppress(Exception):
            transport.run_shell(f"cd -- {_quoted(cache)} && rm -f -- *.part-{job['token']}", timeout=30)
        raise
    if result.exit_status == NO_PYTHON:
        return list(files)
    if result.exit_status != 0:
        raise BackendError(f"the login node could not fetch the datasets from the store: {result.message}")
    done, unreachable = set(), []
    for line in result.stdout.splitlines():
        word, _, rest = line.partition(" ")
        sha = rest.split(" ", 1)[0]
        if sha not in by_sha:
            continue
        if word == "ok":
            done.add(sha)
        elif word == "bad":
            _, got, size = (rest.split(" ") + ["", ""])[:3]
            raise _mismatch(by_sha[sha], got, size)
        elif word == "err":
            unreachable.append(by_sha[sha])
            done.add(sha)
    unreachable += [f for sha, f in by_sha.items() if sha not in done]
    return unreachable
