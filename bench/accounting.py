"""Grid Engine's final records at centre scale: one qacct per ended job against one qacct for all of them.

qacct has no index: every call reads the whole accounting file, which at a centre holds months of jobs (hundreds
of MB to GB; sites rotate it). A tracking cycle asks accounting for the jobs that left the queue since the last
cycle. Without a hint the backend runs `qacct -j ID` for each (one SSH exec, K reads of the file); told when the
earliest of them was submitted (as tracking tells it), it runs one `qacct -b TIME -j 'kh-*'` (one read) and asks
one by one only for what that did not list (backends/sge.py `final_records`).

This bench builds a synthetic accounting file of BENCH_ACCOUNTING_RECORDS records (500,000: portal jobs over 30
days, in SoGE 8.1.9's own line format, copied from a record the test cluster wrote), the newest K ended in the last
hour, and times the two command shapes as the backend writes them (with `-f FILE` added, so the shared accounting
file of the test cluster is not touched) with the installed qacct, for K = 1, 10 and 50 (BENCH_ACCOUNTING_K). Both
answers are parsed with the backend's parser and must be the same records. Writes bench/results-accounting.md.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

RECORDS = int(os.environ.get("BENCH_ACCOUNTING_RECORDS", "500000"))
KS = [int(k) for k in os.environ.get("BENCH_ACCOUNTING_K", "1,10,50").split(",")]
# A SoGE 8.1.9 accounting line as the test cluster's qmaster writes it: job name, number and times are set per record.
LINE = ("all.q:localhost:alice:alice:{name}:{number}:sge:0:{submitted}:{started}:{ended}:0:0:{wall}:0.036210:0.034212:"
        "7968.000000:0:0:0:0:2911:3:0:0.000000:0:0:0:0:56:5:NONE:defaultdepartment:NONE:1:0:0.070422:0.000000:"
        "0.000000:-U alice -l h_rt=300:0.000000:NONE:0.000000:0:0\n")


def _write(path: Path, now: int, newest: int) -> list[str]:
    """RECORDS records over 30 days, the last `newest` of them ended in the last hour; their job numbers."""
    span = 30 * 86400
    with open(path, "w") as out:
        out.write("# Version: 8.1.9\n# synthetic accounting file of bench/accounting.py\n")
        for i in range(RECORDS):
            recent = i >= RECORDS - newest
            ended = now - 3600 + (i - (RECORDS - newest)) * 60 // max(newest, 1) if recent else now - span + i * (span - 7200) // RECORDS
            started = ended - 300
            out.write(LINE.format(name=f"kh-{i:010x}-bench-{i}", number=i + 1, submitted=started - 5, started=started,
                                  ended=ended, wall=300))
    return [str(i + 1) for i in range(RECORDS - newest, RECORDS)]


def _timed(command: str) -> tuple[float, str]:
    start = time.perf_counter()
    result = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=False)
    return time.perf_counter() - start, result.stdout


def main() -> int:
    from backends.sge import SGEBackend
    from backends.sge_parse import parse_qacct

    backend = SGEBackend(None, {"site_profile": "generic"})
    work = Path(tempfile.mkdtemp(prefix="kakehashi-bench-accounting-"))
    accounting = work / "accounting"
    now = int(time.time())
    ids = _write(accounting, now, max(KS))
    size_mb = accounting.stat().st_size / 1e6
    rows = []
    for k in KS:
        wanted = ids[-k:]
        submitted = datetime.fromtimestamp(now - 3600 - 305, UTC) + timedelta(seconds=(max(KS) - k) * 60 // max(KS))
        each = backend.records_command(wanted).replace("qacct ", f"qacct -f {accounting} ")
        once = backend.recent_records_command(submitted).replace("qacct ", f"qacct -f {accounting} ")
        each_s, each_out = _timed(each)
        once_s, once_out = _timed(once)
        a, b = parse_qacct(each_out, set(wanted)), parse_qacct(once_out, set(wanted))
        assert a == b and len(a) == k, (k, len(a), len(b))
        rows.append((k, each_s, once_s))
        print(f"K={k}: one qacct per job {each_s:.2f} s, one qacct for all {once_s:.2f} s", flush=True)
    accounting.unlink()
    version = subprocess.run(["qacct", "-help"], capture_output=True, text=True).stdout.splitlines()[0]
    lines = [
        f"{RECORDS:,} records ({size_mb:.0f} MB, 30 days of portal jobs), {version} on this machine, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average {os.getloadavg()[0]:.1f}.",
        "",
        "| jobs that left the queue (K) | one `qacct -j ID` each (K reads) | one `qacct -b TIME -j 'kh-*'` | ratio |",
        "| --- | --- | --- | --- |",
        *[f"| {k} | {e:.2f} s | {o:.2f} s | ×{e / o:.1f} |" for k, e, o in rows],
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    (ROOT / "bench" / "results-accounting.md").write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
