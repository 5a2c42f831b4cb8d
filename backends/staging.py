"""Datasets onto a cluster before its job is submitted: object-store files into a per-project cache keyed by
content, registered cluster paths in place, each linked at `<job dir>/data/<name>` ($KAKEHASHI_DATA/<name>).

Transport-level and plain Python (docs/decisions/0017). What runs on the login node is composed here from
checked values (hex digests, validated names) and shlex-quoted paths, as the researcher's own account:

- the cache is `<cache root>/<project>/<sha256>`: a file already there with its size is not copied again, so a
  second job with the same data, or a retried dispatch, moves no byte;
- the cache root is the account's own (`~/.kakehashi/cache`, private) unless the cluster's `data_cache` names the
  project's group (`/gs/bs/{group}/.kakehashi/cache`): then every member of the project shares one cache in the
  group's area, its directories group-owned, setgid and group-writable, its files group-readable and read-only,
  so a dataset one researcher staged is not copied again for another (docs/decisions/0027);
- a missing file is streamed over SFTP (`Transport.write_stream`, bounded memory) to a temporary name, its
  SHA-256 computed on the login node from what arrived, and renamed into place only if it matches: a cache
  entry is always whole and right, whatever crashed half-way;
- a registered path must resolve (symlinks followed) inside the project's root there and be readable, and no
  link inside it may point out of that root; it is linked, never copied.
"""

from __future__ import annotations

import contextlib
import queue
import re
import shlex
import threading
import time
import uuid
from collections.abc import Callable, Sequence

from backends.spec import DATA_DIR, BackendError, DataInput, DataRefused, StagingReport
from backends.transport import CommandResult, Transport

DEFAULT_CACHE_ROOT = ".kakehashi/cache"
# In the cluster option `data_cache`, the project's group there (TSUBAME/ABCI `-g` group): a shared cache.
GROUP_FIELD = "{group}"
GROUP_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
SHA256_RE = re.compile(r"[0-9a-f]{64}")
# A dataset's name is one path segment a shell and an S3 key both take as it is (the portal checks it too).
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
PROJECT_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
# How many symlinks inside a registered tree are looked at for escapes, and how deep.
LINK_CHECK_LIMIT, LINK_CHECK_DEPTH = 10_000, 6
# How often a long copy tells its caller it is still alive (the dispatch worker renews its lease on the job).
HEARTBEAT_SECONDS = 15.0
# After a copy that took longer than this, the cache is looked at again before the next file: someone else (another
# researcher of the project, another dispatch) may have staged it meanwhile.
RECHECK_SECONDS = 5.0


def cache_location(template: str, group: str) -> tuple[str, str]:
    """The cache root and the group sharing it, from the cluster's `data_cache` option and the project's group on
    that cluster: `{group}` in the option makes it the project's shared cache; without a group to put there (or
    without the option) it is the account's own, `~/.kakehashi/cache` by default."""
    template = template or DEFAULT_CACHE_ROOT
    if GROUP_FIELD not in template:
        return template, ""
    if not group:
        return DEFAULT_CACHE_ROOT, ""
    if not GROUP_RE.fullmatch(group):
        raise BackendError(f"not a group name the data cache can use: {group!r}")
    return template.replace(GROUP_FIELD, group), group


def home_path(path: str) -> str:
    """A path on the cluster as one shell word, relative ones taken from the directory commands start in (the
    account's home over SSH, the job root locally): symlinks made from it work from anywhere."""
    return shlex.quote(path) if path.startswith("/") else '"$PWD"/' + shlex.quote(path)


def check_inputs(project: str, datasets: Sequence[DataInput]) -> None:
    if not PROJECT_RE.fullmatch(project):
        raise BackendError(f"not a project name the cache can use: {project!r}")
    names = [d.name for d in datasets]
    for d in datasets:
        if not NAME_RE.fullmatch(d.name):
            raise DataRefused(f"{d.name!r} is not a valid dataset name")
        if not d.cluster_path and not d.files:
            raise DataRefused(f"dataset {d.name} holds no file")
        for f in d.files:
            if not SHA256_RE.fullmatch(f.sha256):
                raise DataRefused(f"dataset {d.name}: {f.path or d.name} has no usable SHA-256")
            parts = f.path.split("/") if f.path else []
            if any(p in {"", ".", ".."} or "\0" in p or "\n" in p for p in parts):
                raise DataRefused(f"dataset {d.name}: {f.path!r} is not a plain relative path")
    if len(set(names)) != len(names):
        raise DataRefused("a dataset is attached twice")


def stage(transport: Transport, workdir: str, project: str, datasets: Sequence[DataInput], *,
          cache_root: str = DEFAULT_CACHE_ROOT, group: str = "",
          heartbeat: Callable[[], None] | None = None) -> StagingReport:
    """Put every dataset at `<workdir>/data/<name>`. Idempotent: run again, it copies nothing already there.
    `group`: the cache is shared by that unix group (see `cache_location`); "": it is this account's own.
    `heartbeat` is called every HEARTBEAT_SECONDS or so while bytes move (a copy may take longer than a lease)."""
    check_inputs(project, datasets)
    if group and not GROUP_RE.fullmatch(group):
        raise BackendError(f"not a group name the data cache can use: {group!r}")
    report = StagingReport(shared_group=group)
    if not datasets:
        return report
    cache = f"{cache_root.rstrip('/')}/{project}"
    files = {f.sha256: f for d in datasets for f in d.files}
    cached = _cached_sizes(transport, cache, sorted(files), group)
    looked_at = time.monotonic()
    for sha, f in sorted(files.items()):
        if cached.get(sha) != f.size and time.monotonic() - looked_at > RECHECK_SECONDS:
            # The last copy took a while: what is still missing may have arrived from someone else meanwhile.
            cached = _cached_sizes(transport, cache, [s for s in sorted(files) if s >= sha], group)
            looked_at = time.monotonic()
        if cached.get(sha) == f.size:
            report.reused_files += 1
            report.reused_bytes += f.size
            continue
        _copy_verified(transport, cache, f, heartbeat, group)
        report.copied_files += 1
        report.copied_bytes += f.size
    _link(transport, workdir, cache, datasets)
    report.in_place = sum(1 for d in datasets if d.cluster_path)
    return report


def _run(transport: Transport, command: str, what: str, timeout: float | None = None) -> CommandResult:
    result = transport.run_shell(command, timeout=timeout)
    if result.exit_status not in (0, 3, 4):
        raise BackendError(f"{what} failed on the cluster: {result.message}")
    return result


def _cached_sizes(transport: Transport, cache: str, digests: list[str], group: str = "") -> dict[str, int]:
    """Sizes of the cache entries that exist, in one command (which makes the cache directory first)."""
    if not digests:
        return {}
    prepare = (_shared_directory(cache, group) if group else
               f"mkdir -p -- {home_path(cache)} && chmod 700 -- {home_path(cache)}")
    command = (f"{prepare} && cd -- {home_path(cache)} && "
               f"for h in {' '.join(digests)}; do if [ -f \"$h\" ]; then printf '%s %s\\n' \"$h\" \"$(stat -c %s -- \"$h\")\"; fi; done")
    result = _run(transport, command, "looking into the data cache")
    if result.exit_status == 4:
        raise DataRefused(result.stdout.strip() or result.message)
    out = result.stdout
    sizes = {}
    for line in out.splitlines():
        sha, _, size = line.partition(" ")
        if SHA256_RE.fullmatch(sha) and size.isdigit():
            sizes[sha] = int(size)
    return sizes


def _shared_directory(cache: str, group: str) -> str:
    """Shell that makes `cache` and every missing directory above it group `group`'s: group-owned, setgid and
    rwx for the group, nothing for others. Each is made under a name of its own and renamed into place, so a
    researcher staging at the same moment never finds one half-made (its maker's own group, mode 700).
    Exits 4 saying why where this account cannot share it (not in the group, a directory of another group)."""
    parts = cache.rstrip("/").split("/")
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1) if parts[i - 1] not in ("", ".")]
    token = uuid.uuid4().hex[:12]
    c = home_path(cache)

    def refuse(message: str, *args: str) -> str:
        return "{ printf " + shlex.quote(message + "\n") + " " + " ".join(args) + "; exit 4; }"

    make = (f'for d in {" ".join(home_path(p) for p in prefixes)}; do if [ ! -d "$d" ]; then '
            f't="$d.new-{token}"; mkdir -- "$t" 2>/dev/null && chgrp -- "$g" "$t" && chmod 2770 -- "$t" && '
            'mv -T -n -- "$t" "$d" 2>/dev/null; rmdir -- "$t" 2>/dev/null; [ -d "$d" ] || '
            + refuse("cannot make the shared data cache directory %s: does the group's area exist, and may this account "
                     "write there?", '"$d"') + "; fi; done")
    shared = f'[ "$(stat -c %G -- {c})" = "$g" ] && [ -w {c} ] && [ $((0$(stat -c %a -- {c}) & 070)) -eq 56 ]'
    return " && ".join([
        f"g={shlex.quote(group)}",
        "id -Gn | tr ' ' '\\n' | grep -qxF -- \"$g\" || " + refuse(
            "this account (%s) is not in group %s on the cluster, so it cannot use the project's shared data cache",
            '"$(id -un)"', '"$g"'),
        make,
        shared + " || " + refuse(
            "the shared data cache %s is not group %s's to share (group %s, mode %s): its owner can run chgrp %s "
            "and chmod g+rwxs on it", c, '"$g"', f'"$(stat -c %G -- {c})"', f'"$(stat -c %a -- {c})"', '"$g"'),
    ])


def _copy_verified(transport: Transport, cache: str, f, heartbeat: Callable[[], None] | None = None,
                   group: str = "") -> None:
    temporary = f"{cache}/{f.sha256}.part-{uuid.uuid4().hex[:12]}"
    source = f.open()
    try:
        reader = Prefetched(source, heartbeat=heartbeat)
        try:
            written = transport.write_stream(temporary, reader)
        except BaseException:
            # A copy cut short leaves no stray part file behind, where the cluster can still be told so.
            with contextlib.suppress(Exception):
                transport.run_shell(f"rm -f -- {home_path(temporary)}", timeout=30)
            raise
        finally:
            reader.close()
    finally:
        close = getattr(source, "close", None)
        if close:
            close()
    tmp, final = home_path(temporary), home_path(f"{cache}/{f.sha256}")
    # In a shared cache the file is the group's and read-only before it takes its name: whoever sees it may read
    # it, and no job writes through its link into what the others read.
    share = f"chgrp -- {shlex.quote(group)} {tmp} && chmod 0440 -- {tmp} && " if group else ""
    # Hashed on the login node, from the bytes that arrived: only then does the file take its content's name.
    # OpenSSL uses the CPU's SHA instructions (4x coreutils' sha256sum here); sha256sum where there is no openssl.
    command = (f"got=$({{ openssl dgst -sha256 -r {tmp} 2>/dev/null || sha256sum -- {tmp}; }} | cut -d ' ' -f 1); "
               f"size=$(stat -c %s -- {tmp}); "
               f"if [ \"$got\" = {f.sha256} ] && [ \"$size\" = {int(f.size)} ]; then {share}mv -f -- {tmp} {final}; "
               f"else rm -f -- {tmp}; printf '%s %s\\n' \"$got\" \"$size\"; exit 3; fi")
    result = _run(transport, command, "checking a staged file", timeout=max(60.0, f.size / 50e6))
    if result.exit_status == 3:
        got, _, size = result.stdout.strip().partition(" ")
        raise DataRefused(
            f"{f.path or 'the file'} arrived on the cluster with SHA-256 {got[:16]}… and {size or '?'} bytes, but the "
            f"object store recorded {f.sha256[:16]}… and {f.size} bytes ({written} sent): the stored copy does not "
            "match its checksum; upload it again")


class Prefetched:
    """Reads `source` in a thread a few chunks ahead, so fetching from the object store and writing to the cluster
    overlap; at most `depth` chunks wait in memory."""

    def __init__(self, source, chunk: int = 1 << 20, depth: int = 8,
                 heartbeat: Callable[[], None] | None = None) -> None:
        self._heartbeat, self._beat_at = heartbeat, time.monotonic()
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
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
            except queue.Full:
                continue

    def read(self, size: int = -1) -> bytes:
        if self._heartbeat is not None and time.monotonic() - self._beat_at > HEARTBEAT_SECONDS:
            self._beat_at = time.monotonic()
            self._heartbeat()
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


def check_cluster_path(path: str, root: str) -> str:
    """A shell command that exits 0 if `path` resolves inside `root`, is readable and holds no link out of
    `root`; 4 with the reason on stdout otherwise. It prints the resolved path on success.

    The two paths appear only as shlex-quoted words (arguments of realpath and printf), never inside a string the
    shell parses again: a directory named `$(…)` is a name like any other."""
    p, r = shlex.quote(path), shlex.quote(root)
    resolved, bad, unreadable = '"$p"', '"$bad"', '"$unreadable"'

    def refuse(message: str, *args: str) -> str:
        return "{ printf " + shlex.quote(message + "\n") + " " + " ".join(args) + "; exit 4; }"

    outside = "outside the project's root"
    # The root reaches awk through its environment: -v would interpret backslashes in it.
    escaping_links = (
        f'find "$p" -maxdepth {LINK_CHECK_DEPTH} -type l -print0 2>/dev/null | head -z -n {LINK_CHECK_LIMIT} | '
        'xargs -0 -r realpath -m -- | '
        """r="$root" awk 'index($0, ENVIRON["r"] "/") != 1 && $0 != ENVIRON["r"] {print; exit}'"""
    )
    return "; ".join([
        f"root=$(realpath -e -- {r} 2>/dev/null) || " + refuse("the project root %s does not exist", r),
        f"p=$(realpath -e -- {p} 2>/dev/null) || " + refuse("%s does not exist or cannot be reached", p),
        'case "$p/" in "$root"/*) ;; *) ' + refuse(f"%s resolves to %s, {outside} %s", p, resolved, r) + " ;; esac",
        '[ -r "$p" ] || ' + refuse("%s is not readable by this account", p),
        'if [ -d "$p" ]; then [ -x "$p" ] || ' + refuse("%s cannot be entered by this account", p),
        f"bad=$({escaping_links})",
        '[ -z "$bad" ] || ' + refuse(f"a link inside it points to %s, {outside}", bad),
        'unreadable=$(find "$p" -maxdepth 2 ! -readable -print -quit 2>/dev/null)',
        '[ -z "$unreadable" ] || ' + refuse("%s is not readable by this account", unreadable) + "; fi",
        "printf '%s\\n' \"$p\"",
    ])


def _link(transport: Transport, workdir: str, cache: str, datasets: Sequence[DataInput]) -> None:
    data = f"{workdir.rstrip('/')}/{DATA_DIR}"
    lines = [f"mkdir -p -- {home_path(data)}"]
    for d in datasets:
        target = f"{data}/{d.name}"
        if d.cluster_path:
            lines += [f"p=$({check_cluster_path(d.cluster_path, d.root)})" " || { printf 'dataset "
                      f"{d.name}: %s\\n' \"$p\"; exit 4; }}",
                      f'ln -sfn -- "$p" {home_path(target)}']
        elif len(d.files) == 1 and not d.files[0].path:
            lines.append(f"ln -sfn -- {home_path(cache + '/' + d.files[0].sha256)} {home_path(target)}")
        else:
            # A folder: a real directory of links, so the job sees the dataset's own names.
            lines.append(f"rm -rf -- {home_path(target)} && mkdir -p -- {home_path(target)}")
            folders = sorted({f.path.rsplit('/', 1)[0] for f in d.files if '/' in f.path})
            if folders:
                lines.append("mkdir -p -- " + " ".join(home_path(f"{target}/{folder}") for folder in folders))
            for f in d.files:
                lines.append(f"ln -sfn -- {home_path(cache + '/' + f.sha256)} {home_path(target + '/' + f.path)}")
    command = " && ".join(lines[:1]) + "".join(f"\n{line} || exit $?" for line in lines[1:])
    result = _run(transport, "set -o pipefail\n" + command, "linking the datasets into the job directory")
    if result.exit_status in (3, 4):
        raise DataRefused(result.stdout.strip() or result.message)
