"""The sampler's cost on a busy node, and what samples weigh: `python -m bench.sampler` writes results-sampler.md.

- CPU: the real `backends/sampler.sh` runs every second for SECONDS beside a busy "job" (a shell loop carrying the
  job's KAKEHASHI_JOB_DIR, plus 20 idle job processes), with the nvidia-smi stand-in answering 8 GPUs, then without
  nvidia-smi; its CPU (its own and its children's, from the kernel's rusage) per sample, and per hour at the default
  30 s. The busy loop's own iterations are counted with and without the sampler (same run, alternating).
- Storage: bytes the sampler writes per node-day (8 GPUs, 30 s) and what the portal keeps of a 30-day job's series
  (8 GPUs on 2 nodes) after bounding.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from backends.sampling import parse_samples
from backends.script import SAMPLER_FILE, SAMPLER_SOURCE
from portal.samples import series

ROOT = Path(__file__).resolve().parents[1]
SECONDS = int(os.environ.get("BENCH_SAMPLER_SECONDS", "20"))
FIXTURE = ROOT / "tests/backends/fixtures/nvidia_smi/a100-8x-training.csv"


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _busy(job_dir: Path, seconds: float) -> int:
    """Iterations of a busy shell loop in `seconds`, carrying the job's environment."""
    env = {**os.environ, "KAKEHASHI_JOB_DIR": str(job_dir)}
    out = subprocess.run(["sh", "-c", f'end=$(( $(date +%s) + {int(seconds)} )); n=0; '
                                      'while [ "$(date +%s)" -lt "$end" ]; do n=$((n+1)); done; echo $n'],
                         env=env, capture_output=True, text=True, check=True).stdout
    return int(out.strip())


def measure(smi: str, job_dir: Path) -> dict:
    (job_dir / SAMPLER_FILE).write_bytes(SAMPLER_SOURCE)
    env = {**os.environ, "KAKEHASHI_JOB_DIR": str(job_dir)}
    idle = [subprocess.Popen(["sleep", "600"], env=env) for _ in range(20)]
    try:
        before = _children_cpu()
        sampler = subprocess.Popen(["sh", str(job_dir / SAMPLER_FILE), str(job_dir), "1", smi, "bench"], env=env)
        with_sampler = _busy(job_dir, SECONDS)
        (job_dir / "kakehashi-exit-status").write_text("0\n")
        sampler.wait(timeout=10)
        cpu = _children_cpu() - before
        without = _busy(job_dir, SECONDS)
    finally:
        for p in idle:
            p.kill()
            p.wait()
    log = (job_dir / "kakehashi-samples" / "bench.log").read_text()
    parsed = parse_samples(log)
    samples = len(parsed.procs)
    # The busy loop's CPU is in `cpu` too (it is also a child): subtract what it used alone.
    return {"samples": samples, "log": log, "with": with_sampler, "without": without, "cpu_all": cpu}


def sampler_cpu(smi: str, job_dir: Path) -> tuple[float, int]:
    """The sampler's own CPU seconds and samples over SECONDS, measured alone (nothing else a child)."""
    (job_dir / SAMPLER_FILE).write_bytes(SAMPLER_SOURCE)
    env = {**os.environ, "KAKEHASHI_JOB_DIR": str(job_dir)}
    idle = [subprocess.Popen(["sleep", "600"], env=env) for _ in range(20)]
    try:
        before = _children_cpu()
        sampler = subprocess.Popen(["sh", str(job_dir / SAMPLER_FILE), str(job_dir), "1", smi, "bench"], env=env)
        time.sleep(SECONDS)
        (job_dir / "kakehashi-exit-status").write_text("0\n")
        sampler.wait(timeout=10)
        cpu = _children_cpu() - before
    finally:
        for p in idle:
            p.kill()
            p.wait()
    samples = len(parse_samples((job_dir / "kakehashi-samples" / "bench.log").read_text()).procs)
    return cpu, samples


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="kh-bench-sampler-"))
    standin = work / "gpus"
    standin.mkdir()
    shutil.copy(ROOT / "tests/cluster/nvidia-smi-standin", standin / "nvidia-smi")
    shutil.copy(FIXTURE, standin / "gpus.csv")
    lines = ["# The sampler's cost and what samples weigh", "",
             f"`python -m bench.sampler`, {time.strftime('%Y-%m-%d')}, load average "
             f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; {SECONDS} s at one sample a second.", ""]
    rows = []
    for label, smi in (("8 GPUs (the nvidia-smi stand-in)", str(standin / "nvidia-smi")),
                       ("no nvidia-smi", "/nonexistent/nvidia-smi")):
        job = work / label.split()[0]
        job.mkdir()
        cpu, samples = sampler_cpu(smi, job)
        per_sample = cpu / max(samples, 1)
        rows.append(f"| {label} | {samples} | {per_sample * 1000:.1f} ms | {per_sample * 120:.2f} s | "
                    f"{per_sample / 30 * 100:.3f} % |")
    lines += ["| Node | Samples | CPU per sample | CPU per hour at 30 s | Share of a core at 30 s |",
              "| --- | --- | --- | --- | --- |", *rows, "",
              "CPU is the sampler's and its children's (`grep`, `awk`, `sed`, `date`, the stand-in), from the "
              "kernel's rusage; a real `nvidia-smi` costs more than the stand-in (tens of ms on a loaded driver, "
              "less with persistence mode).", ""]
    job = work / "busy"
    job.mkdir()
    busy = measure(str(standin / "nvidia-smi"), job)
    lines += [f"A busy job loop beside it: {busy['with']:,} iterations with the sampler at 1 s, {busy['without']:,} "
              f"without, in {SECONDS} s each (ratio {busy['with'] / max(busy['without'], 1):.3f}; "
              "a loaded machine moves this by more than the sampler costs: read the CPU figures).", ""]
    per_sample_bytes = len(busy["log"].encode()) / max(busy["samples"], 1)
    day = per_sample_bytes * 2880
    data: dict = {}
    log_line = [line for line in busy["log"].splitlines() if line.startswith("g ")][0]
    start = 1_800_000_000
    for node in ("node01", "node02"):
        text = [f"# kakehashi-sampler 1 node={node} interval=30 hz=100 page_kb=4 nvidia-smi=yes start={start}"]
        for i in range(30 * 2880):
            t = start + 30 * i
            text.append(f"p {t} 12 {i * 2400} 81920000")
            text += [f"g {t} " + log_line.split(" ", 2)[2].replace(", 0, ", f", {g}, ", 1) for g in range(8)]
            if len(text) > 50_000:
                data = series.add(data, parse_samples("\n".join(text)))
                text = []
        data = series.add(data, parse_samples("\n".join(text)))
    kept = len(json.dumps(data).encode())
    points = max(len(d["p"]) for d in data["gpus"].values())
    lines += ["| Storage | Bytes |", "| --- | --- |",
              f"| sampler file, per node-day (8 GPUs, 30 s) | {day / 1e6:.2f} MB |",
              f"| the portal's series of a 30-day job, 2 nodes × 8 GPUs, after bounding ({points} points a GPU) | "
              f"{kept / 1e3:.0f} kB |", ""]
    (ROOT / "bench" / "results-sampler.md").write_text("\n".join(lines))
    print("\n".join(lines))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    django.setup()
    main()
