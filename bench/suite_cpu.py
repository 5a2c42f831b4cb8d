"""Where the machine's CPU goes while a command runs (issue 29: the suite's time), for every process, not only the
command's own tree: the test cluster's daemons, PostgreSQL, sshd's sessions and the jobs they start are not children
of `make test`, so `/usr/bin/time` cannot see them.

    sudo python3 -m bench.suite_cpu -- make test        # as root: the kernel's process accounting

Every process that ends writes its CPU time to a file through the kernel's BSD process accounting (acct(2)); the
processes still running at the end are read from /proc. A sampler notes each process's command line every 0.5 s, so a
`python` is told apart (an xdist worker, a Celery worker, a job's train.py); a process shorter than that keeps only
its name. The report groups CPU seconds by what the process was, against the machine's busy and idle time.
Linux only; needs CONFIG_BSD_PROCESS_ACCT (Debian's kernels have it) and root. The standard library only: it runs
before `make test` has made the venv.
"""

from __future__ import annotations

import collections
import ctypes
import os
import re
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")
AHZ = 100  # acct_v3 counts in these units on Linux
RECORD = 64  # sizeof(struct acct_v3)
LAB = "hub: Lab servers and kernels (papermill's kernels too)"
TRAINING = "jobs: the templates' training (PyTorch)"
DRIVER = "Playwright's driver"
# What a process was, by its command line (first match wins); else by its command's name (BY_NAME), else that name.
KINDS = [
    (r"exec\(eval\(sys\.stdin", "pytest: an xdist worker (tests, live server threads)"),
    (r"-m pytest", "pytest: the controller"),
    (r"celery .*worker", "Celery workers (live, make run's)"),
    (r"manage\.py runserver", "make run: its web server"),
    (r"manage\.py (setup_demo|migrate|collectstatic)", "make run: migrate, demo data, static files"),
    (r"-m jupyterhub -f|configurable-http-proxy", "hub: JupyterHub and its proxy"),
    (r"jupyterhub\.singleuser|jupyterhub-singleuser|ipykernel", LAB),
    (r"train\.py|torchrun", TRAINING),
    (r"papermill", "jobs: notebooks (papermill)"),
]
BY_NAME = {"chromium": "Chromium", "chromium-headle": "Chromium", "postgres": "PostgreSQL", "weed": "SeaweedFS",
           "kakehashi": "the CLI", "jupyterhub-sing": LAB, "pt_elastic": TRAINING, "node": DRIVER, "node-MainThread": DRIVER}


def _comp(value: int) -> float:
    """acct's comp_t: 13 bits of mantissa, 3 of base-8 exponent."""
    return ((value & 0x1FFF) << (3 * (value >> 13))) / AHZ


def _cpu_now() -> tuple[float, float]:
    """(all, idle + iowait) CPU seconds of the machine since boot."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(fields) / TICK, (fields[3] + fields[4]) / TICK


def _stat(pid: str) -> tuple[str, int, float]:
    """(name, start tick since boot, own CPU seconds) of a process, from /proc/<pid>/stat (OSError once it ended)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    name, rest = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()
    return name, int(rest[19]), (int(rest[11]) + int(rest[12])) / TICK


def _processes() -> dict[int, tuple[str, int, float]]:
    """pid -> (name, start tick, own CPU seconds) of every process now."""
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                out[int(entry)] = _stat(entry)
            except OSError:
                continue
    return out


def _boot_time() -> int:
    """When the machine booted, in seconds since the epoch (/proc/stat's btime): /proc gives start times from boot."""
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("btime "):
            return int(line.split()[1])
    raise RuntimeError("/proc/stat has no btime")


class CommandLines(threading.Thread):
    """(pid, start second) -> command line of every process seen, polled every 0.5 s. The kernel reuses process ids
    (a suite starts tens of thousands of processes), so a line is found again by the id and the second the process
    started, which process accounting also records."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.lines: dict[int, dict[int, str]] = collections.defaultdict(dict)  # pid -> {start second: line}
        self.stop = threading.Event()
        self.boot = _boot_time()

    def run(self) -> None:
        while not self.stop.is_set():
            for entry in os.listdir("/proc"):
                if not entry.isdigit():
                    continue
                try:
                    pid = int(entry)
                    second = self.second(_stat(entry)[1])
                    if second in self.lines[pid]:
                        continue
                    raw = Path(f"/proc/{entry}/cmdline").read_bytes()
                except OSError:
                    continue
                self.lines[pid][second] = raw.replace(b"\0", b" ")[:300].decode(errors="replace")
            self.stop.wait(0.5)

    def second(self, start_tick: int) -> int:
        """A start tick since boot (/proc) as a second since the epoch (process accounting's start time)."""
        return self.boot + start_tick // TICK

    def line(self, pid: int, started: int) -> str:
        """The command line of process `pid` that started at second `started`, or "" if it ended before it was seen.
        The two clocks drift apart after boot (acct's start time is the wall clock's, /proc's counts from boot: 1 s
        apart 40 minutes after a boot here, more later), so the nearest start within DRIFT seconds is taken; a
        window of ±1 s left a fifth of a run's CPU unnamed."""
        seen = {second: line for second, line in self.lines.get(pid, {}).items() if abs(second - started) <= DRIFT}
        return seen[min(seen, key=lambda second: abs(second - started))] if seen else ""


DRIFT = 10


def _kind(name: str, line: str) -> str:
    for pattern, kind in KINDS:
        if re.search(pattern, line):
            return kind
    if name.startswith("python"):
        return "python: other (jobs' own scripts, manage.py commands, short-lived ones)"
    return BY_NAME.get(name, name)


def _shape(line: str) -> str:
    """A command line with what changes between runs of one command (numbers, temporary paths) folded."""
    line = re.sub(r"/tmp/[^ ]*", "/tmp/…", line)
    return re.sub(r"\d+", "N", line).strip()


def _ended(account: bytes):
    """(pid, start second, name, CPU seconds) of each acct_v3 record: a process that ended while accounting was on."""
    for offset in range(0, len(account) - RECORD + 1, RECORD):
        record = account[offset:offset + RECORD]
        (pid,) = struct.unpack_from("<I", record, 16)
        user, system = struct.unpack_from("<HH", record, 32)
        (started,) = struct.unpack_from("<I", record, 24)
        yield pid, started, record[48:64].split(b"\0")[0].decode(errors="replace"), _comp(user) + _comp(system)


def measure(command: list[str]) -> tuple[int, str]:
    """Run `command` with process accounting on; (its exit code, the report)."""
    libc = ctypes.CDLL(None, use_errno=True)
    with tempfile.NamedTemporaryFile(prefix="kakehashi-acct-") as account:
        lines = CommandLines()
        lines.start()
        before, started = _processes(), _cpu_now()
        if libc.acct(account.name.encode()) != 0:
            raise SystemExit(f"acct(2) failed: {os.strerror(ctypes.get_errno())} (root and CONFIG_BSD_PROCESS_ACCT needed)")
        t0 = time.monotonic()
        try:
            code = subprocess.call(command)
        finally:
            libc.acct(None)
        wall = time.monotonic() - t0
        after, ended = _processes(), _cpu_now()
        lines.stop.set()
        records = Path(account.name).read_bytes()
    by_kind: collections.Counter[str] = collections.Counter()
    count: collections.Counter[str] = collections.Counter()
    by_line: collections.Counter[tuple[str, str]] = collections.Counter()
    for pid, began, name, seconds in _ended(records):
        line = lines.line(pid, began)
        kind = _kind(name, line)
        by_kind[kind] += seconds
        count[kind] += 1
        by_line[kind, _shape(line) or name] += seconds
    for pid, (name, start, cpu) in after.items():  # still running: what it spent during the command
        earlier = before.get(pid)
        spent = cpu - (earlier[2] if earlier and earlier[1] == start else 0)
        if spent > 0.05:
            line = lines.line(pid, lines.second(start))
            kind = _kind(name, line)
            by_kind[kind] += spent
            by_line[kind, _shape(line) or name] += spent
    total, idle = ended[0] - started[0], ended[1] - started[1]
    report = [f"# CPU of the whole machine while `{' '.join(command)}` ran ({os.cpu_count()} cores)", "",
              f"wall {wall:.0f} s, exit {code}; CPU time {total:.0f} s: busy {total - idle:.0f} s, "
              f"idle {idle:.0f} s ({idle / total:.0%})", "", "| CPU s | share of busy | processes | what |",
              "| ---: | ---: | ---: | --- |"]
    report += [f"| {seconds:.1f} | {seconds / (total - idle):.0%} | {count[kind]} | {kind} |"
               for kind, seconds in by_kind.most_common(25)]
    # Within the largest kinds, which command lines spent it (numbers, ports and temporary paths folded together).
    report += ["", "| CPU s | command line (the costliest within the largest kinds) |", "| ---: | --- |"]
    top_kinds = {kind for kind, _ in by_kind.most_common(8)}
    report += [f"| {seconds:.1f} | {kind[:20]}: `{line[:150]}` |"
               for (kind, line), seconds in by_line.most_common(400) if kind in top_kinds and seconds >= 3][:60]
    return code, "\n".join(report)


def main() -> None:
    if "--" not in sys.argv:
        raise SystemExit(__doc__)
    code, report = measure(sys.argv[sys.argv.index("--") + 1:])
    print(report)
    out = Path(__file__).with_name("results-suite-cpu.md")
    out.write_text(report + "\n")
    print(f"written to {out}")
    sys.exit(code)


if __name__ == "__main__":
    main()
