"""Helpers shared by the templates' distributed scripts; staged next to them in every job's directory."""

from __future__ import annotations

import gc
import os
import socket
import sys

import torch.distributed as dist

# What Open MPI's mpirun tells each process, under the names torch.distributed reads (torchrun sets those).
_FROM_MPIRUN = {
    "RANK": "OMPI_COMM_WORLD_RANK",
    "WORLD_SIZE": "OMPI_COMM_WORLD_SIZE",
    "LOCAL_RANK": "OMPI_COMM_WORLD_LOCAL_RANK",
}


def join_process_group(backend: str) -> tuple[int, int, int]:
    """Join the job's process group, whether torchrun or mpirun started this process; (rank, world, local rank).

    The rendezvous is MASTER_ADDR:MASTER_PORT, which the job script exports (and mpirun passes on). Every rank
    says where it runs, so the job's own output shows how many processes started on which node.
    """
    for name, mpi_name in _FROM_MPIRUN.items():
        if name not in os.environ and mpi_name in os.environ:
            os.environ[name] = os.environ[mpi_name]
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    # Slurm's name for the node first: on a test cluster several nodes may share one host name.
    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    # One write per line, so the lines of ranks sharing an output stream never interleave.
    sys.stdout.write(f"rank {rank} of {world} (local rank {local_rank}) on {node}\n")
    sys.stdout.flush()
    return rank, world, local_rank


def leave_together() -> None:
    """Tear the process group down on every rank at once, then exit without interpreter finalization.

    The results are written by now. gloo's worker threads can outlive destroy_process_group() while something
    still references the group, and their teardown during interpreter exit then aborts the rank ("terminate
    called without an active exception", SIGABRT; pytorch/pytorch#179291 describes the race). torchrun reports
    that as a failed job although the work succeeded, about once in fifty runs on a loaded node here.
    """
    dist.barrier()  # a rank that leaves while rank 0 is still writing would break the others' last collective
    gc.collect()
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
