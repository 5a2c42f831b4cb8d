"""Helpers shared by the templates' distributed scripts; staged next to them in every job's directory."""

from __future__ import annotations

import gc
import os
import sys

import torch.distributed as dist


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
