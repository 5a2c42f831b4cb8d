"""GPU node health check: matrix-multiply TFLOP/s per device, all-reduce bus bandwidth, nvidia-smi summary.

Started by torchrun with one process per GPU (on every node of the allocation). On a machine without GPUs it
runs the same measurements on the CPU (gloo) so the numbers are smaller but real. Rank 0 prints a summary
and writes health.json to $KAKEHASHI_OUTPUT_DIR; Kakehashi stores it with the hardware type, so researchers
see measured speed (and speed per point) in the hardware picker.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import torch
import torch.distributed as dist

from kakehashi_dist import join_process_group, leave_together  # staged next to this file


def matmul_tflops(device: torch.device, size: int, dtype: torch.dtype, repeats: int) -> float:
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    for _ in range(2):  # warm-up: kernels, caches, clocks
        a @ b
    sync(device)
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    sync(device)
    seconds = time.perf_counter() - start
    return 2 * size**3 * repeats / seconds / 1e12


def allreduce_busbw(device: torch.device, megabytes: int, repeats: int) -> float:
    """Bus bandwidth in GB/s as nccl-tests defines it: algbw × 2(n−1)/n."""
    world = dist.get_world_size()
    tensor = torch.ones(megabytes * 1024 * 1024 // 4, device=device, dtype=torch.float32)
    for _ in range(2):
        dist.all_reduce(tensor)
    sync(device)
    start = time.perf_counter()
    for _ in range(repeats):
        dist.all_reduce(tensor)
    sync(device)
    seconds = (time.perf_counter() - start) / repeats
    algbw = tensor.numel() * 4 / seconds / 1e9
    return algbw * (2 * (world - 1) / world) if world > 1 else 0.0


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def nvidia_smi() -> list[str]:
    if shutil.which("nvidia-smi") is None:
        return []
    result = subprocess.run(
        ["nvidia-smi", "--query-gpu=index,name,memory.total,driver_version,temperature.gpu,utilization.gpu",
         "--format=csv,noheader"],
        capture_output=True, text=True, timeout=30, check=False,
    )
    return [line.strip() for line in result.stdout.splitlines() if line.strip()]


def main() -> None:
    use_cuda = torch.cuda.is_available()
    rank, world, local_rank = join_process_group("nccl" if use_cuda else "gloo")
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
        tflops = matmul_tflops(device, 8192, torch.bfloat16, 20)
        busbw = allreduce_busbw(device, 256, 10)
        name = torch.cuda.get_device_name(device)
    else:
        tflops = matmul_tflops(device, 1024, torch.float32, 5)
        busbw = allreduce_busbw(device, 16, 5)
        name = "cpu"
    per_rank = [None] * world
    dist.all_gather_object(per_rank, {"rank": rank, "host": os.uname().nodename, "device": name, "tflops": tflops})
    if rank == 0:
        result = {
            "mode": "gpu" if use_cuda else "cpu",
            "device": name,
            "world_size": world,
            "tflops": round(sum(r["tflops"] for r in per_rank) / world, 3),
            "tflops_total": round(sum(r["tflops"] for r in per_rank), 3),
            "slowest_tflops": round(min(r["tflops"] for r in per_rank), 3),
            "busbw_gbps": round(busbw, 3),
            "per_rank": per_rank,
            "nvidia_smi": nvidia_smi(),
            "torch": torch.__version__,
            "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        for line in result["nvidia_smi"]:
            print(f"nvidia-smi: {line}")
        print(f"matmul: {result['tflops']} TFLOP/s per device ({result['mode']}, slowest {result['slowest_tflops']})")
        print(f"all-reduce bus bandwidth: {result['busbw_gbps']} GB/s over {world} processes")
        out = Path(os.environ.get("KAKEHASHI_OUTPUT_DIR", "."))
        out.mkdir(parents=True, exist_ok=True)
        (out / "health.json").write_text(json.dumps(result, indent=2))
    leave_together()


if __name__ == "__main__":
    main()
