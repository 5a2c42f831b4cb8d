"""Listing what a job left in its outputs/ directory on a shell-reached cluster: the one command and its pure
parser. `Backend.list_outputs` runs them.

Symbolic links are listed as not files and never followed (find's default): neither outputs/ itself nor a folder
under it that is a link is entered. Names may hold any byte but "/" and NUL: find ends each entry with NUL and
`tr` swaps NUL and newline, so an entry is a line for `head` however it is named (a newline inside a name travels
as NUL; `parse_listing` swaps it back). `head -z` would do without the swap but is missing from coreutils before
8.25 (RHEL 7 login nodes).
"""

from __future__ import annotations

import shlex

from backends.spec import OUTPUTS_DIR, OutputListing, RemoteFile

MAX_LISTED_FILES = 10_000
MAX_LISTED_DEPTH = 32


def listing_command(workdir: str, limit: int, depth: int) -> str:
    outputs = shlex.quote(f"{workdir.rstrip('/')}/{OUTPUTS_DIR}")
    return (f"[ -L {outputs} ] && echo L; "
            f"find {outputs} -mindepth 1 -maxdepth {depth} ! -type d -printf '%y\\t%s\\t%P\\0' 2>/dev/null "
            f"| tr '\\0\\n' '\\n\\0' | head -n {limit + 1}; "
            f"find {outputs} -mindepth {depth + 1} ! -type d -printf 'D\\n' -quit 2>/dev/null; true")


def parse_listing(stdout: str, limit: int = MAX_LISTED_FILES) -> OutputListing:
    """What `list_outputs`' command printed, a line each: `type TAB size TAB path` as find's `%y\\t%s\\t%P` (type "f"
    a regular file; a newline in the path arrives as NUL), "L" (outputs/ is a symbolic link) or "D" (something
    lies deeper than listed). More than `limit` entries: the first `limit`, and `more`."""
    files, not_files, flags, entries = [], [], set(), 0
    for line in stdout.split("\n"):
        if line in ("L", "D"):
            flags.add(line)
            continue
        kind, _, rest = line.partition("\t")
        size, _, path = rest.partition("\t")
        if not kind or not size.isdigit() or not path:
            continue
        entries += 1
        if entries > limit:
            flags.add("more")
            continue
        path = path.replace("\0", "\n")
        if kind == "f":
            files.append(RemoteFile(path, int(size)))
        else:
            not_files.append(path)
    return OutputListing(files, not_files, more="more" in flags, deeper="D" in flags, outputs_link="L" in flags)
