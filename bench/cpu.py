"""Where a staged GiB's time goes: the CPU seconds each process spends moving it, measured for `scp`, staging on one
stream and staging on two (issue 28, goal 1; bench/README.md quotes it).

On a shared 2-core machine wall time follows the CPU every path needs, so this counts, per path and per GiB:
the worker (this process: boto3's GET, the relay), its children (`ssh`, `ssh-agent`), the store (SeaweedFS's process)
and the login node's side (every process of the login account, sampled from /proc every 50 ms: the session's sshd,
the command, the hash; a process's last sample before it exits is what counts, so this side is slightly low).
CPU seconds are stable where wall times are not. The login account's processes include any other session of it that
ran meanwhile (other engineers' tests on the shared test cluster): the best of BENCH_CPU_ROUNDS rounds is kept.
Run with `python -m bench.cpu`; writes bench/results-cpu.md.
"""

from __future__ import annotations

import hashlib
import os
import resource
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import datapath as dp  # noqa: E402

ROUNDS = int(os.environ.get("BENCH_CPU_ROUNDS", "3"))
SIZE_MIB = 1024
TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[float, float]:
    """(own, reaped children's) CPU seconds of a process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK, (int(fields[13]) + int(fields[14])) / TICK


class LoginSide:
    """CPU seconds of the login account's processes while the block runs (sampled from /proc every 50 ms)."""

    def __init__(self, uid: int) -> None:
        self.uid, self.seen, self.before, self.own = uid, {}, {}, 0.0

    def _sample(self) -> dict[int, float]:
        found = {}
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    if os.stat(f"/proc/{name}").st_uid == self.uid:
                        found[int(name)] = _stat(int(name))[0]
                except (OSError, IndexError, ValueError):
                    continue
        return found

    def __enter__(self) -> LoginSide:
        import threading

        self.before = self._sample()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        start = time.thread_time()
        while not self._stop.wait(0.05):
            self.seen.update(self._sample())
        self.own = time.thread_time() - start  # the sampler's own CPU, not the worker's

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.seen.update(self._sample())

    @property
    def seconds(self) -> float:
        return sum(cpu - self.before.get(pid, 0.0) for pid, cpu in self.seen.items())


def _self() -> tuple[float, float]:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime


def main() -> int:
    from backends.base import DataInput, JobSpec
    from backends.slurm import SlurmBackend

    work = Path(tempfile.mkdtemp(prefix="kakehashi-bench-cpu-", dir="/var/tmp"))
    server, s3 = dp.store(work)
    import pwd

    login_uid = pwd.getpwnam(dp.USER).pw_uid
    base = f"kakehashi-bench/{uuid.uuid4().hex[:8]}"
    dp.remote(f"mkdir -p {base}")
    source = work / "dataset.bin"
    digest = hashlib.sha256()
    with open(source, "wb") as fh:
        for _ in range(SIZE_MIB):
            chunk = os.urandom(dp.MiB)
            digest.update(chunk)
            fh.write(chunk)
    s3.upload_file(str(source), "bench", "d.bin")
    data = dp.data_file(s3, "d.bin", "", digest.hexdigest(), SIZE_MIB * dp.MiB)

    def scp() -> None:
        dp.timed(["scp", "-q", *dp.ssh_options(), "-P", str(dp.PORT), str(source), f"{dp.USER}@127.0.0.1:{base}/s.bin"])

    def staging(streams: int) -> None:
        transport = dp.transport()
        cache = f"{base}/cache-{uuid.uuid4().hex[:6]}"
        backend = SlurmBackend(transport, {"data_cache": cache, "ssh_streams": streams})
        transport.run_shell("true")
        backend.stage_data(JobSpec(name="b", payload="true", walltime_seconds=60, workdir=f"{base}/job"), "b",
                           [DataInput("d", files=[data])])
        transport.close()

    paths = {"scp": scp, "staging, 1 stream": lambda: staging(1), "staging, 2 streams": lambda: staging(2)}
    best: dict[str, dict[str, float]] = {}
    try:
        for _ in range(ROUNDS):
            for name, run in paths.items():
                me0, kids0 = _self()
                store0 = _stat(server.process.pid)[0]
                with LoginSide(login_uid) as login:
                    start = time.perf_counter()
                    run()
                    wall = time.perf_counter() - start
                me1, kids1 = _self()
                store1 = _stat(server.process.pid)[0]
                cpu = {"wall": wall, "worker": me1 - me0 - login.own, "ssh client": kids1 - kids0,
                       "store": store1 - store0, "login node": login.seconds}
                cpu["all"] = sum(v for k, v in cpu.items() if k != "wall")
                if name not in best or cpu["all"] < best[name]["all"]:
                    best[name] = cpu
                dp.remote(f"rm -rf {base}/s.bin {base}/cache-*")
                print(name, {k: round(v, 2) for k, v in cpu.items()}, flush=True)
    finally:
        server.stop()
        dp.remote(f"rm -rf {base}")
        shutil.rmtree(work, ignore_errors=True)
    columns = ["worker", "ssh client", "store", "login node", "all"]
    lines = [f"CPU seconds to move 1 GiB (best of {ROUNDS} rounds by total CPU), {time.strftime('%Y-%m-%d')}, "
             f"load average {os.getloadavg()[0]:.1f} at the end:", "",
             "| Path | " + " | ".join(columns) + " | wall |", "| --- |" + " --- |" * (len(columns) + 1)]
    for name, cpu in best.items():
        lines.append(f"| {name} | " + " | ".join(f"{cpu[c]:.2f}" for c in columns) + f" | {cpu['wall']:.2f} s |")
    text = "\n".join(lines) + "\n"
    print(text)
    (ROOT / "bench" / "results-cpu.md").write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
