"""CPU profiles of the daemons `bench/throughput.py` starts (BENCH_PROFILE_DIR): where the portal's time goes.

- gunicorn: `-c python:bench.profiling` — each worker profiles itself from fork to exit (CPU time, not wall);
- Celery: `-A bench.profiling` — the same app as `workers`, and each pool process profiles itself likewise.

Each process writes `<BENCH_PROFILE_DIR>/<gunicorn|celery>-<pid>.prof`; read them with `python -m pstats`.
"""

from __future__ import annotations

import cProfile
import os
import time
from pathlib import Path

from celery.signals import worker_process_init, worker_process_shutdown

from workers.celery import app  # noqa: F401 - `celery -A bench.profiling` finds it here

_profile: cProfile.Profile | None = None


def _start() -> None:
    global _profile
    _profile = cProfile.Profile(time.process_time)
    _profile.enable()


def _stop(name: str) -> None:
    if _profile is not None:
        _profile.disable()
        _profile.dump_stats(str(Path(os.environ["BENCH_PROFILE_DIR"]) / f"{name}-{os.getpid()}.prof"))


# gunicorn's server hooks (this module is also its config file)
def post_fork(server, worker) -> None:  # noqa: ANN001 - gunicorn's signature
    _start()


def worker_exit(server, worker) -> None:  # noqa: ANN001
    _stop("gunicorn")


@worker_process_init.connect
def _celery_child_started(**_: object) -> None:
    _start()


@worker_process_shutdown.connect
def _celery_child_stopping(**_: object) -> None:
    _stop("celery")
