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
- a missing file is streamed to the login node (`Transport.pipe`: OpenSSH's client where the worker has it, bounded
  memory; a large file alone, on several streams, small files many to a tar stream: backends/staging_copy.py,
  docs/decisions/0041) or fetched by the login node itself from the store (`data_pull`, backends/staging_pull.py,
  0042) to a temporary name, its SHA-256 computed on the login node from what arrived, and renamed into place only
  if it matches: a cache entry is always whole and right, whatever crashed half-way;
- a registered path must resolve (symlinks followed) inside the project's root there and be readable, and no
  link inside it may point out of that root; it is linked, never copied.
"""

from __future__ import annotations

import io
import re
import shlex
import tarfile
import time
import uuid
from collections.abc import Callable, Sequence

from backends import staging_copy, staging_pull
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
# Small files travel in tar streams of at most this many files or bytes: between two streams the cache is looked
# at again (another stager may have brought the rest), and a failed stream costs at most this much again.
BATCH_FILES, BATCH_BYTES = 5000, 2 << 30
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
        paths = {f.path for f in d.files}
        folders = {f.path.rsplit("/", i)[0] for f in d.files for i in range(1, f.path.count("/") + 1)}
        if paths & folders:
            raise DataRefused(f"dataset {d.name}: {sorted(paths & folders)[0]!r} is both a file and a folder")
    if len(set(names)) != len(names):
        raise DataRefused("a dataset is attached twice")


def stage(transport: Transport, workdir: str, project: str, datasets: Sequence[DataInput], *,
          cache_root: str = DEFAULT_CACHE_ROOT, group: str = "",
          heartbeat: Callable[[], None] | None = None, pull: bool = False, streams: int = 0) -> StagingReport:
    """Put every dataset at `<workdir>/data/<name>`. Idempotent: run again, it copies nothing already there.
    `group`: the cache is shared by that unix group (see `cache_location`); "": it is this account's own.
    `heartbeat` is called every few seconds while bytes move (a copy may take longer than a lease).
    `pull`: the login node fetches what it can from the object store itself (presigned GETs, backends/staging_pull);
    what it cannot reach is relayed as usual. `streams`: how many streams carry one large file (0: the default)."""
    check_inputs(project, datasets)
    if group and not GROUP_RE.fullmatch(group):
        raise BackendError(f"not a group name the data cache can use: {group!r}")
    report = StagingReport(shared_group=group)
    if not datasets:
        return report
    cache = f"{cache_root.rstrip('/')}/{project}"
    files = {f.sha256: f for d in datasets for f in d.files}
    cached, where = _cached_sizes(transport, cache, sorted(files), group)
    # Large files one stream each; the rest in tar streams of at most BATCH_FILES files or BATCH_BYTES bytes.
    todo = [f for sha, f in sorted(files.items()) if cached.get(sha) != f.size]
    if pull and todo:
        fetched = [f for f in todo if f.presign is not None]
        relay = {f.sha256 for f in staging_pull.pull(transport, cache, fetched, group, heartbeat)}
        for f in fetched:
            if f.sha256 not in relay:
                _arrived(report, cached, f, "pulled")
        todo = [f for f in todo if f.presign is None or f.sha256 in relay]
    # Small files that sit in packs: a few ranged GETs of the packs for many files (docs/decisions/0062); what
    # does not arrive whole that way goes its own way below.
    packed, todo = staging_copy.from_packs(todo)
    for group_of_files in _batches(packed):
        failed = staging_copy.copy_packed(transport, cache, group_of_files, group, heartbeat)
        todo += failed
        again = {f.sha256 for f in failed}
        for f in group_of_files:
            if f.sha256 not in again:
                _arrived(report, cached, f, "packed")
    todo.sort(key=lambda f: f.sha256)
    large = [f for f in todo if f.size >= staging_copy.LARGE_FILE]
    batches = _batches([f for f in todo if f.size < staging_copy.LARGE_FILE])
    looked_at = time.monotonic()
    for group_of_files in [[f] for f in large] + batches:
        if time.monotonic() - looked_at > RECHECK_SECONDS:
            # The last copy took a while: what is still missing may have arrived from someone else meanwhile.
            found, _ = _cached_sizes(transport, cache, [f.sha256 for f in group_of_files], group)
            cached.update(found)
            looked_at = time.monotonic()
        missing = [f for f in group_of_files if cached.get(f.sha256) != f.size]
        if len(group_of_files) == 1 and missing and missing[0].size >= staging_copy.LARGE_FILE:
            staging_copy.copy_large(transport, cache, missing[0], group, heartbeat, streams)
        else:
            staging_copy.copy_batch(transport, cache, missing, group, heartbeat)
        for f in missing:
            _arrived(report, cached, f)
    report.reused_files = len(files) - report.copied_files
    report.reused_bytes = sum(f.size for f in files.values()) - report.copied_bytes
    _link(transport, workdir, cache, where, datasets)
    report.in_place = sum(1 for d in datasets if d.cluster_path)
    return report


def _arrived(report: StagingReport, cached: dict[str, int], f, how: str = "") -> None:
    """`f` is in the cache now: counted as copied, and as `how` it came ("pulled", "packed") where that is counted."""
    cached[f.sha256] = f.size
    report.copied_files += 1
    report.copied_bytes += f.size
    if how:
        setattr(report, f"{how}_files", getattr(report, f"{how}_files") + 1)
        setattr(report, f"{how}_bytes", getattr(report, f"{how}_bytes") + f.size)


def _run(transport: Transport, command: str, what: str, timeout: float | None = None) -> CommandResult:
    result = transport.run_shell(command, timeout=timeout)
    if result.exit_status not in (0, 3, 4):
        raise BackendError(f"{what} failed on the cluster: {result.message}")
    return result


def _batches(files: list) -> list[list]:
    batches: list[list] = []
    size = 0
    for f in files:
        if not batches or len(batches[-1]) >= BATCH_FILES or size + f.size > BATCH_BYTES:
            batches.append([])
            size = 0
        batches[-1].append(f)
        size += f.size
    return batches


def _cached_sizes(transport: Transport, cache: str, digests: list[str], group: str = "") -> tuple[dict[str, int], str]:
    """Sizes of the cache entries that exist, and the cache's absolute path, in one command (which makes the cache
    directory first). The digests go on stdin: 10,000 of them are longer than one shell word may be."""
    prepare = (_shared_directory(cache, group) if group else
               f"mkdir -p -- {home_path(cache)} && chmod 700 -- {home_path(cache)}")
    command = (f"{prepare} && cd -- {home_path(cache)} && pwd && "
               "{ xargs -r stat -c '%n %s' -- 2>/dev/null; true; }")
    result = transport.run_shell(command, stdin="".join(f"{sha}\n" for sha in digests).encode(), timeout=120)
    if result.exit_status == 4:
        raise DataRefused(result.stdout.strip() or result.message)
    if result.exit_status != 0:
        raise BackendError(f"looking into the data cache failed on the cluster: {result.message}")
    where, _, listing = result.stdout.partition("\n")
    sizes = {}
    for line in listing.splitlines():
        sha, _, size = line.partition(" ")
        if SHA256_RE.fullmatch(sha) and size.isdigit():
            sizes[sha] = int(size)
    return sizes, where.strip()


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


def _link(transport: Transport, workdir: str, cache: str, where: str, datasets: Sequence[DataInput]) -> None:
    """Each dataset at `<job dir>/data/<name>`: a registered path or a one-file dataset as one link, a folder as a
    real directory tree of links to the cache (the dataset's own names), unpacked by tar from a stream of link
    entries: 10,000 files cost one `tar`, not 10,000 `ln`. `where`: the cache's absolute path."""
    data = f"{workdir.rstrip('/')}/{DATA_DIR}"
    lines = [f"mkdir -p -- {home_path(data)}"]
    folders = []
    for d in datasets:
        target = f"{data}/{d.name}"
        if d.cluster_path:
            lines += [f"p=$({check_cluster_path(d.cluster_path, d.root)})" " || { printf 'dataset "
                      f"{d.name}: %s\\n' \"$p\"; exit 4; }}",
                      f'ln -sfn -- "$p" {home_path(target)}']
        elif len(d.files) == 1 and not d.files[0].path:
            lines.append(f"ln -sfn -- {home_path(cache + '/' + d.files[0].sha256)} {home_path(target)}")
        else:
            # A folder: made anew, so a file dropped from the dataset since the last job is not left behind.
            lines.append(f"rm -rf -- {home_path(target)}")
            folders.append(d)
    command = " && ".join(lines[:1]) + "".join(f"\n{line} || exit $?" for line in lines[1:])
    what = "linking the datasets into the job directory"
    if not folders:
        result = _run(transport, "set -o pipefail\n" + command, what)
    else:
        command += f"\ntar -x -f - -C {home_path(data)} --no-same-owner || exit 5"
        result = transport.pipe("set -o pipefail\n" + command, _LinkTree(where, folders), timeout=120,
                                counted=False)
        if result.exit_status not in (0, 3, 4):
            raise BackendError(f"{what} failed on the cluster: {result.message}")
    if result.exit_status in (3, 4):
        raise DataRefused(result.stdout.strip() or result.message)


class _LinkTree:
    """A tar stream of each folder dataset's directories and links (`<name>/<path>` → `<cache>/<sha256>`), made as
    it is read: memory stays small whatever the number of files."""

    def __init__(self, cache: str, folders: Sequence[DataInput]) -> None:
        self._entries = self._generate(cache.rstrip("/"), folders)
        self._rest = b""

    @staticmethod
    def _generate(cache: str, folders: Sequence[DataInput]):
        for d in folders:
            made = set()
            for path in [d.name, *sorted({f"{d.name}/{f.path.rsplit('/', 1)[0]}" for f in d.files if "/" in f.path})]:
                parts = path.split("/")
                for i in range(1, len(parts) + 1):
                    folder = "/".join(parts[:i])
                    if folder not in made:
                        made.add(folder)
                        info = tarfile.TarInfo(folder)
                        info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, int(time.time())
                        yield info.tobuf(format=tarfile.PAX_FORMAT)
            for f in d.files:
                info = tarfile.TarInfo(f"{d.name}/{f.path}")
                info.type, info.linkname, info.mode, info.mtime = (tarfile.SYMTYPE, f"{cache}/{f.sha256}", 0o777,
                                                                   int(time.time()))
                yield info.tobuf(format=tarfile.PAX_FORMAT)
        yield bytes(1024)

    def read(self, size: int = -1) -> bytes:
        out = io.BytesIO()
        out.write(self._rest)
        while out.tell() < max(size, 1):
            part = next(self._entries, None)
            if part is None:
                break
            out.write(part)
        data = out.getvalue()
        cut = len(data) if size < 0 else size
        data, self._rest = data[:cut], data[cut:]
        return data
