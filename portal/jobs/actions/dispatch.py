"""Dispatch and recovery: a queued job, or a sweep's whole array, handed to its scheduler exactly once.

One way for both (docs/decisions/0002, 0005, 0022): a dispatch hands over a batch, each handover one submit to the
scheduler: a job (with the jobs queued for the same account, a batch of several), or every waiting element of a
sweep's array (one submit for many jobs). Take a lease on the waiting jobs under their row locks; look before
submitting again (the scheduler may have the job from an attempt whose reply was lost); stage the job's datasets
onto the cluster (docs/decisions/0017: idempotent, so a retry copies nothing twice; data the job can never have
fails it before anything is queued); submit; record the scheduler's ids with one compare-and-swap on the jobs
still SUBMITTING. A refusal fails a handover's jobs; a scheduler that cannot be reached releases their lease for
the retry. `recover_stale_jobs` re-sends what a lost message or a dead worker left behind.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from backends import REGISTRY, backend_class
from backends.base import BackendError, DataRefused, JobSpec, Reach, SubmitRefused, TransportError
from portal.clusters.connect import NoClusterAccount, account_for, backend_for
from portal.enqueue import CANCEL_JOB, DISPATCH_JOB, enqueue, enqueue_on_commit
from portal.jobs import events, locks, transitions
from portal.jobs.models import Job, JobGroup, JobState
from portal.jobs.specs import attached_datasets, build_array_spec, build_spec
from portal.storage.datasets import data_inputs, pin
from portal.storage.objectstore import ObjectStoreError

log = logging.getLogger(__name__)

WAITING = frozenset({JobState.QUEUED, JobState.SUBMITTING})


@dataclass
class DispatchOutcome:
    status: str  # submitted | found | refused | skipped | busy | retry
    detail: str = ""


@dataclass
class _Handover:
    """One submit to the scheduler: a job, or the waiting elements of a sweep's array."""

    first: Job  # whose cluster, owner, datasets and script the submit uses (an array's: its first element)
    jobs: list[Job]  # the jobs it leases and records: the job, or the array's waiting elements
    spec: JobSpec | None = None  # an array's is given; a job's is built when it is handed over
    attempts: int = 0  # this attempt's number, set by the lease

    @property
    def array(self) -> bool:
        return self.first.array_index is not None

    @property
    def noun(self) -> str:
        return "array" if self.array else "job"

    def moves(self, backend, submitted: str, found: bool, now: datetime) -> list[transitions.Move]:
        """Its jobs to PENDING with their scheduler ids (an array's elements: each its element's)."""
        moves = []
        for job in self.jobs:
            scheduler_id = backend.element_id(submitted, job.array_index) if self.array else submitted
            event = events.accepted(scheduler_id, array_id=submitted if self.array else "", found=found)
            moves.append(transitions.Move(job, JobState.PENDING, event, {
                "scheduler_id": scheduler_id, "submitted_at": now, "dispatch_lease_until": None, "last_seen_at": now}))
        return moves


def _lease_time() -> timedelta:
    return timedelta(seconds=settings.KAKEHASHI_DISPATCH_LEASE_SECONDS)


def dispatch_job(job_id: int) -> DispatchOutcome:
    """Hand a queued job to its scheduler, exactly once, however often this runs.

    On a cluster reached over SSH it takes along the other jobs queued for the same account (docs/decisions/
    0022): each under its own lease, submitted over concurrent channels of the one pooled connection, recorded
    together; then, if the batch was full, it looks for more. The outcome is this job's.
    """
    with transaction.atomic(durable=True):  # the lease must be committed before anything reaches the scheduler
        batch = locks.job_and_queued_siblings(job_id, batch_size(), batched_kinds())
        leased = _lease_jobs(batch) if batch and batch[0].array_index is None else None
    if not batch:
        # Its row is held elsewhere (a cancel, another attempt): wait for it alone, having let go of any sibling
        # that statement locked (waiting while holding them could close a cycle with a bulk cancel).
        with transaction.atomic():
            batch = [locks.job(job_id, for_dispatch=True)]
            leased = _lease_jobs(batch) if batch[0].array_index is None else None
    job = batch[0]
    if job.array_index is not None:
        # An element of a sweep submitted as one scheduler array: the whole array goes at once.
        return dispatch_array(job.group_id)
    if isinstance(leased, DispatchOutcome):
        return leased
    outcome = _hand_over(leased)[0]
    if len(leased) >= batch_size() > 1:
        _more_rounds(job)  # a full batch: more may be waiting
    return outcome


@cache
def batched_kinds() -> tuple[str, ...]:
    """The cluster kinds whose jobs one dispatch takes along: those reached over SSH to a login node."""
    kinds = []
    for kind in REGISTRY:
        try:
            if backend_class(kind).reach is Reach.LOGIN_NODE:
                kinds.append(kind)
        except ImportError:  # a backend whose extras this deployment lacks
            continue
    return tuple(kinds)


def batch_size() -> int:
    """Jobs one dispatch takes at once: at most two waves of channels, so that every submit started before the
    lease (2 × the SSH timeout + 30 s) could run out."""
    return max(1, min(settings.KAKEHASHI_DISPATCH_BATCH, 2 * settings.KAKEHASHI_SSH_CHANNELS))


def _lease_jobs(jobs: list[Job]) -> list[_Handover] | DispatchOutcome:
    """Lease the locked job and its locked queued siblings, a handover each (the job's first), or say why not."""
    job = jobs[0]
    if job.state not in WAITING:
        return DispatchOutcome("skipped", f"job is {job.state}")
    if getattr(job, "has_datasets", True):
        jobs = [job]  # staging reads the database while it copies: a job with datasets goes alone
    return _lease([_Handover(j, [j]) for j in jobs])


def dispatch_array(group_id: int) -> DispatchOutcome:
    """Hand a sweep's waiting elements to the scheduler as one array, exactly once, however often this runs.

    The elements move together: all SUBMITTING under one lease, then all PENDING with their element ids. One
    cancelled before the submit is still an index of the array (the script numbers them all), so it is
    deleted on the scheduler right after.
    """
    with transaction.atomic(durable=True):  # the lease must be committed before anything reaches the scheduler
        jobs = locks.group_jobs(group_id)
        waiting = [j for j in jobs if j.state in WAITING]
        if not waiting:
            return DispatchOutcome("skipped", "no element of the array is waiting")
        jobs.sort(key=lambda j: j.array_index)
        leased = _lease([_Handover(jobs[0], waiting)])
    if isinstance(leased, DispatchOutcome):
        return leased
    group = JobGroup.objects.get(pk=group_id)
    for job in jobs:
        job.group = group  # whose script the elements share
    leased[0].spec = build_array_spec(jobs, group.scheduler_name, group.remote_dir)
    return _hand_over(leased)[0]


def _lease(handovers: list[_Handover]) -> list[_Handover] | DispatchOutcome:
    """Move the locked jobs of these handovers to SUBMITTING under one lease, each handover's under its own attempt
    count: the handovers, or why this attempt must not submit (another holds the first one's jobs)."""
    now = timezone.now()
    if any(j.state == JobState.SUBMITTING and j.dispatch_lease_until and j.dispatch_lease_until > now
           for j in handovers[0].jobs):
        return DispatchOutcome("busy", f"another attempt holds this {handovers[0].noun}")
    lease = now + _lease_time()
    moves = []
    for handover in handovers:
        handover.attempts = max(j.dispatch_attempts for j in handover.jobs) + 1
        event = events.handing_over(array=handover.array)
        moves += [transitions.Move(j, JobState.SUBMITTING, event, {"dispatch_lease_until": lease,
                                                                    "dispatch_attempts": handover.attempts})
                  for j in handover.jobs if j.state == JobState.QUEUED]
        # Those already SUBMITTING were left by an attempt that died: take over, but look before submitting.
        transitions.update([j for j in handover.jobs if j.state == JobState.SUBMITTING],
                           dispatch_lease_until=lease, dispatch_attempts=handover.attempts)
    transitions.apply(moves)
    return handovers


def _more_rounds(job: Job) -> None:
    """While full batches keep waiting for the same account, hand them over too (this worker holds the cluster's
    slot), for at most a third of a lease; jobs whose own task comes later find them taken."""
    deadline = time.monotonic() + settings.KAKEHASHI_DISPATCH_LEASE_SECONDS / 3
    while time.monotonic() < deadline:
        with transaction.atomic():
            jobs = locks.queued_of(job.cluster_id, job.user_id, job.project_id, batch_size())
            leased = _lease_jobs(jobs) if jobs else None
        if not isinstance(leased, list) or not leased:
            return
        _hand_over(leased)
        if len(leased) < batch_size():
            return


def _hand_over(handovers: list[_Handover]) -> list[DispatchOutcome]:
    """Submit leased handovers of one account (over concurrent channels when there are several) and record the
    answers: the outcome of each."""
    first = handovers[0].first
    try:
        backend = backend_for(first.cluster, _account(first))
    except (BackendError, TransportError, NoClusterAccount) as exc:
        return _record(None, handovers, [exc] * len(handovers))
    for handover in handovers:  # in the thread that owns the database connection; the channels only talk SSH
        if handover.spec is None:
            handover.spec = build_spec(handover.first, group=handover.first.allocation_group or "")

    def submit(handover: _Handover):
        try:
            existing = backend.find(handover.spec) if handover.attempts > 1 else None
            if existing:
                return existing, True
            return backend.submit(_staged(backend, handover), handover.first.rendered_script), False
        except (DataRefused, SubmitRefused, BackendError, TransportError, ObjectStoreError) as exc:
            return exc

    if len(handovers) == 1:
        answers = [submit(handovers[0])]  # staging, for a job with datasets, reads the database: this thread
    else:
        with ThreadPoolExecutor(max_workers=min(len(handovers), settings.KAKEHASHI_SSH_CHANNELS)) as pool:
            answers = list(pool.map(submit, handovers))
    return _record(backend, handovers, answers)


def _record(backend, handovers: list[_Handover], answers: list) -> list[DispatchOutcome]:
    """Record the scheduler's answers in one transaction: the ids with one compare-and-swap on the jobs still
    SUBMITTING (a job that left SUBMITTING meanwhile records nothing), refusals failed, the rest's lease released
    for a retry (re-sent in 5 s; the first handover's retry is its task's). Then an array's elements cancelled
    before its submit are deleted on the scheduler."""
    outcomes: list[DispatchOutcome] = []
    dropped: list[tuple[Job, str]] = []
    with transaction.atomic(durable=True):
        now = timezone.now()
        pairs = list(zip(handovers, answers, strict=True))
        moves = []
        for h, (submitted, found) in [(h, answer) for h, answer in pairs if not isinstance(answer, Exception)]:
            if h.array:
                JobGroup.objects.filter(pk=h.first.group_id).update(scheduler_id=submitted)
            moves += h.moves(backend, submitted, found, now)
        made = {move.job.pk for move in transitions.apply(moves, expect=JobState.SUBMITTING)}
        failed = [job.pk for h, answer in pairs if isinstance(answer, Exception) for job in h.jobs]
        locked = {job.pk: job for job in locks.dispatched(failed)} if failed else {}
        for index, (h, answer) in enumerate(pairs):
            if not isinstance(answer, Exception):
                outcomes.append(_recorded(h, answer, made))
                if h.array:
                    dropped += [(job, answer[0]) for job in Job.objects.filter(
                        group_id=h.first.group_id, state=JobState.CANCELLED, scheduler_id="")]
                continue
            jobs = [locked[job.pk] for job in h.jobs if locked[job.pk].state == JobState.SUBMITTING]
            if not jobs:
                outcomes.append(DispatchOutcome("skipped", f"job is {locked[h.jobs[0].pk].state}"))
            elif isinstance(answer, (DataRefused, SubmitRefused)):
                event = (events.data_refused(str(answer)) if isinstance(answer, DataRefused)
                         else events.refused_by_scheduler(str(answer), noun=h.noun))
                transitions.apply([transitions.Move(job, JobState.FAILED, event, {"ended_at": now}) for job in jobs])
                outcomes.append(DispatchOutcome("refused", str(answer)))
            else:
                # Release the lease so the retry (or the recovery sweep) may take over at once.
                transitions.update(jobs, dispatch_lease_until=None,
                                   state_reason=f"could not reach the scheduler yet, will retry: {answer}")
                outcomes.append(DispatchOutcome("retry", str(answer)))
                if index:
                    enqueue_on_commit(DISPATCH_JOB, h.first.pk, countdown=5)
    for job, array_id in dropped:
        _delete_dropped_element(backend, job, array_id)
    return outcomes


def _recorded(handover: _Handover, answer: tuple[str, bool], made: set[int]) -> DispatchOutcome:
    """The outcome of a submit the scheduler accepted; a cancel asked for meanwhile is sent once this commits."""
    submitted, found = answer
    moved = [job for job in handover.jobs if job.pk in made]
    for job in moved:
        if job.cancel_requested_at is not None:
            enqueue_on_commit(CANCEL_JOB, job.pk)
    if moved:
        return DispatchOutcome("found" if found else "submitted", submitted)
    first = handover.jobs[0]
    state = Job.objects.filter(pk=first.pk).values_list("state", flat=True).first()
    log.error("job %s left SUBMITTING while being submitted (now %s, id %s)", first.pk, state, submitted)
    return DispatchOutcome("skipped", f"job is {state}")


def _account(job: Job):
    """Whom the job runs as: the account it was rendered for at submit (read with the job's row), else looked up."""
    if job.cluster_account_id is not None:
        return job.cluster_account
    return account_for(job.cluster, job.user, job.project)


def _staged(backend, handover: _Handover) -> JobSpec:
    """The spec to submit once the job's datasets are on the cluster (a note on each job says what moved)."""
    first = handover.first
    attached = attached_datasets(first)
    if not attached:
        return handover.spec
    def renew_lease() -> None:
        # Copying a large dataset may outlast the lease: keep it, so no other attempt takes over and submits.
        with transaction.atomic():
            jobs = locks.dispatched([job.pk for job in handover.jobs])
            transitions.update([j for j in jobs if j.state == JobState.SUBMITTING],
                               dispatch_lease_until=timezone.now() + _lease_time())

    pins: list = []
    inputs = data_inputs(attached, first.cluster, pins)
    # What each job is given, recorded before it is staged: its page names the data even after the files change.
    pin([job.pk for job in handover.jobs], pins)
    spec, report = backend.stage_data(handover.spec, first.project.slug, inputs, heartbeat=renew_lease)
    transitions.note(handover.jobs, events.datasets_staged([d.name for d in attached], report))
    return spec


def _delete_dropped_element(backend, job: Job, array_id: str) -> None:
    """An element cancelled before the array was submitted must not run (nor cost) anyway."""
    element = backend.element_id(array_id, job.array_index)
    try:
        backend.cancel(element)
    except (BackendError, TransportError) as exc:
        log.warning("could not delete element %s of cancelled job %s: %s", element, job.pk, exc)
        transitions.note(job, events.dropped_element_not_deleted(element, str(exc)))
    else:
        transitions.note(job, events.dropped_element_deleted(element))


def recover_stale_jobs() -> list[int]:
    """Re-dispatch jobs whose dispatch message or worker was lost. Safe: dispatch is idempotent."""
    now = timezone.now()
    stale = now - timedelta(seconds=settings.KAKEHASHI_STALE_DISPATCH_SECONDS)
    queued = Job.objects.filter(state=JobState.QUEUED, updated_at__lt=stale)
    submitting = Job.objects.filter(state=JobState.SUBMITTING).exclude(dispatch_lease_until__gt=now)
    rows = sorted(set(queued.values_list("id", "group_id", "array_index"))
                  | set(submitting.values_list("id", "group_id", "array_index")))
    ids, arrays = [], set()
    for job_id, group_id, array_index in rows:
        if array_index is not None:
            if group_id in arrays:
                continue  # one dispatch submits the whole array
            arrays.add(group_id)
        ids.append(job_id)
    for job_id in ids:
        enqueue(DISPATCH_JOB, job_id)
    return ids
