"""What the sampler (backends/sampler.sh) writes on each node, read back: the batched fetch of new bytes for many
jobs in one command, and the pure parser of its lines (nvidia-smi's CSV inside). No Django.

One round trip per cluster per tracking cycle fetches every running job's new sample bytes: the command walks
each job's `kakehashi-samples/` directory and prints, per node file, a header line and then exactly the bytes past
the offset the portal already holds (whole lines only, at most `limit` per file), so the portal appends and moves
its offset. The sampler writes ASCII only, so a character is a byte.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

SAMPLES_DIR = "kakehashi-samples"
# The query the sampler asks nvidia-smi, in this order (--format=csv,noheader,nounits).
GPU_QUERY = ("timestamp", "index", "uuid", "utilization.gpu", "memory.used", "memory.total", "power.draw")
MARK = "@@kakehashi-samples"
_NODE_FILE = re.compile(r"[A-Za-z0-9._-]{1,64}\.log")


@dataclass(frozen=True)
class FetchRequest:
    key: str  # the caller's name for the job (its id)
    workdir: str  # the job directory (relative to the login home, or absolute)
    offsets: Mapping[str, int] = field(default_factory=dict)  # node file name → bytes already held


def fetch_command(requests: Sequence[FetchRequest], limit: int = 256 * 1024) -> str:
    """One shell command printing, for every job and node file, `MARK key file size from` then the bytes from
    `from` to the last newline before min(size, from + limit). It never fails (a job with no samples prints none)."""
    limit = int(limit)
    parts = [
        # f: the file, o: its offset: print the header and the whole lines past o (head -c, then cut back to the
        # last newline by the reader; the size read first bounds what a still-growing file gives).
        "_kh_f() { s=$(wc -c < \"$2\" 2>/dev/null) || return 0; s=${s##* }; n=$((s - $3));"
        f" [ \"$n\" -gt {limit} ] && n={limit}; [ \"$n\" -gt 0 ] || n=0;"
        f" printf '{MARK} %s %s %s %s %s\\n' \"$1\" \"${{2##*/}}\" \"$s\" \"$3\" \"$n\";"
        " [ \"$n\" -gt 0 ] && tail -c +$(($3 + 1)) \"$2\" | head -c \"$n\"; echo; }",
    ]
    for request in requests:
        directory = f"{request.workdir.rstrip('/')}/{SAMPLES_DIR}"
        cases = " ".join(f"{shlex.quote(name)}) o={int(offset)} ;;" for name, offset in sorted(request.offsets.items())
                         if _NODE_FILE.fullmatch(name))
        parts.append(
            f"for p in {_quoted_dir(directory)}/*.log; do [ -f \"$p\" ] || continue; o=0; "
            f"case \"${{p##*/}}\" in {cases} *) ;; esac; _kh_f {shlex.quote(request.key)} \"$p\" \"$o\"; done"
        )
    parts.append("true")
    return "; ".join(parts)


def _quoted_dir(path: str) -> str:
    if path.startswith("~/"):
        return '"$HOME"/' + shlex.quote(path[2:])
    return shlex.quote(path)


@dataclass(frozen=True)
class Chunk:
    start: int  # the offset these bytes begin at
    text: str  # whole lines only
    size: int  # the file's size when read


def parse_fetch(stdout: str) -> dict[str, dict[str, Chunk]]:
    """What `fetch_command` printed: {key: {node file: Chunk}}, only whole lines (a line still being written
    waits for the next cycle)."""
    found: dict[str, dict[str, Chunk]] = {}
    pos = 0
    while True:
        at = stdout.find(MARK + " ", pos)
        if at < 0:
            return found
        end = stdout.find("\n", at)
        if end < 0:
            return found
        fields = stdout[at:end].split(" ")
        if len(fields) != 6 or not all(f.isdigit() for f in fields[3:]) or not _NODE_FILE.fullmatch(fields[2]):
            pos = end + 1
            continue
        _, key, name, size, start, length = fields
        body = stdout[end + 1: end + 1 + int(length)]
        pos = end + 1 + int(length) + 1
        whole = body[: body.rfind("\n") + 1] if "\n" in body else ""
        found.setdefault(key, {})[name] = Chunk(int(start), whole, int(size))


# ------------------------------------------------------------------------------------------------- the lines


@dataclass(frozen=True)
class Header:
    node: str
    interval: int
    hz: int
    page_kb: int
    nvidia_smi: bool
    start: int


@dataclass(frozen=True)
class ProcSample:
    t: int
    procs: int
    cpu_ticks: int
    rss_kb: int


@dataclass(frozen=True)
class GpuSample:
    t: int
    index: int
    uuid: str
    utilization: float | None  # percent; None where nvidia-smi says [N/A] (a MIG-enabled GPU, an old driver)
    memory_used_mib: float | None
    memory_total_mib: float | None
    power_w: float | None


@dataclass
class Parsed:
    headers: list[Header] = field(default_factory=list)
    procs: list[ProcSample] = field(default_factory=list)
    gpus: list[GpuSample] = field(default_factory=list)
    errors: list[tuple[int, str]] = field(default_factory=list)
    unreadable: int = 0  # lines that are none of these (counted, never guessed at)


def number(value: str) -> float | None:
    """A nvidia-smi field: a number, or None for "[N/A]", "[Not Supported]", "N/A", "[Unknown Error]"..."""
    value = value.strip()
    try:
        result = float(value)
    except ValueError:
        return None
    return result if result == result and abs(result) != float("inf") else None


def parse_gpu_csv(t: int, line: str) -> GpuSample | None:
    """One line of `nvidia-smi --query-gpu=<GPU_QUERY> --format=csv,noheader,nounits`; None if it is not one."""
    fields = [f.strip() for f in line.split(",")]
    if len(fields) != len(GPU_QUERY) or not fields[1].isdigit():
        return None
    _, index, uuid, util, used, total, power = fields
    return GpuSample(t, int(index), uuid[:96], number(util), number(used), number(total), number(power))


def parse_samples(text: str) -> Parsed:
    """The sampler's lines (see backends/sampler.sh); what is not one of them is counted, not trusted."""
    parsed = Parsed()
    for line in text.splitlines():
        kind, _, rest = line.partition(" ")
        if kind == "#":
            header = _header(rest)
            if header is None:
                parsed.unreadable += 1
            else:
                parsed.headers.append(header)
            continue
        t_text, _, body = rest.partition(" ")
        if not t_text.isdigit():
            if line:
                parsed.unreadable += 1
            continue
        t = int(t_text)
        if kind == "p":
            values = body.split(" ")
            if len(values) == 3 and all(v.isdigit() for v in values):
                parsed.procs.append(ProcSample(t, *(int(v) for v in values)))
                continue
        elif kind == "g":
            gpu = parse_gpu_csv(t, body)
            if gpu is not None:
                parsed.gpus.append(gpu)
                continue
        elif kind == "e":
            parsed.errors.append((t, body[:200]))
            continue
        parsed.unreadable += 1
    return parsed


def _header(rest: str) -> Header | None:
    words = rest.split(" ")
    if len(words) < 2 or words[0] != "kakehashi-sampler":
        return None
    values = dict(word.split("=", 1) for word in words[2:] if "=" in word)
    try:
        return Header(node=values.get("node", "")[:64], interval=int(values.get("interval", "0")),
                      hz=int(values.get("hz", "100")) or 100, page_kb=int(values.get("page_kb", "4")),
                      nvidia_smi=values.get("nvidia-smi") == "yes", start=int(values.get("start", "0")))
    except ValueError:
        return None
