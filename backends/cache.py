"""A project's dataset cache on a cluster (`<cache root>/<project>/<sha256>`, backends/staging.py): what is in it,
and removing entries the portal chose to prune (least recently used first, never a file a queued or running job
was given: portal/storage/caches.py decides; this only lists and removes).

Plain Python over a Transport. Every name that reaches the shell is checked here: the project as PROJECT_RE, each
entry as a SHA-256 in hex, the root shlex-quoted."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from backends.spec import BackendError
from backends.staging import PROJECT_RE, SHA256_RE, home_path
from backends.transport import Transport

REMOVE_AT_ONCE = 500  # names per rm command: well inside any command-line limit


@dataclass(frozen=True)
class CacheEntry:
    sha256: str
    size: int
    modified: float  # when it was staged (its mtime on the cluster), seconds since the epoch


def _directory(cache_root: str, project: str) -> str:
    if not PROJECT_RE.fullmatch(project):
        raise BackendError(f"not a project name the cache can use: {project!r}")
    return home_path(f"{cache_root.rstrip('/')}/{project}")


def entries(transport: Transport, cache_root: str, project: str) -> list[CacheEntry]:
    """The whole files in the project's cache (temporary names of copies under way are not entries)."""
    directory = _directory(cache_root, project)
    command = (f"d={directory}; [ -d \"$d\" ] || exit 0; "
               "find \"$d\" -maxdepth 1 -type f -printf '%f %s %T@\\n'")
    result = transport.run_shell(command, timeout=300)
    if result.exit_status != 0:
        raise BackendError(f"listing the data cache failed: {result.message}")
    found = []
    for line in result.stdout.splitlines():
        name, _, rest = line.partition(" ")
        size, _, modified = rest.partition(" ")
        if SHA256_RE.fullmatch(name) and size.isdigit():
            try:
                found.append(CacheEntry(name, int(size), float(modified)))
            except ValueError:
                continue
    return found


def remove(transport: Transport, cache_root: str, project: str, shas: Sequence[str]) -> int:
    """Remove these entries; returns how many were asked for (one already gone is not an error)."""
    directory = _directory(cache_root, project)
    bad = [s for s in shas if not SHA256_RE.fullmatch(s)]
    if bad:
        raise BackendError(f"not cache entries: {bad[:3]}")
    for start in range(0, len(shas), REMOVE_AT_ONCE):
        names = " ".join(shlex.quote(s) for s in shas[start:start + REMOVE_AT_ONCE])
        result = transport.run_shell(f"cd {directory} 2>/dev/null || exit 0; rm -f -- {names}", timeout=300)
        if result.exit_status != 0:
            raise BackendError(f"pruning the data cache failed: {result.message}")
    return len(shas)
