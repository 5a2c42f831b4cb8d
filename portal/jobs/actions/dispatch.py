"""Dispatch and recovery: a queued job, or a sweep's whole array, handed to its scheduler exactly once.

One way for both (docs/decisions/0002, 0005): take a lease on the waiting jobs under their row locks; look
before submitting again (the scheduler may have the job from an attempt whose reply was lost); stage the job's
datasets onto the cluster (docs/decisions/0017: idempotent, so a retry copies nothing twice; data the job can
never have fails it before anything is queued); submit; record
the scheduler's id with a compare-and-swap on the jobs still SUBMITTING. A refusal fails them; a scheduler that
cannot be reached releases the lease for the retry. `recover_stale_jobs` re-sends what a lost message or a dead
worker left behind.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
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
from portal.storage.datasets import data_inputs
from portal.storage.objectstore import ObjectStoreError

log = logging.getLogger(__name__)

WAITING = frozenset({JobState.QUEUED, JobState.SUBMITTING})


@dataclass
class DispatchOutcome:
    status: str  # submitted | found | refused | skipped | busy | retry
    detail: str = ""


@dataclass
class _Handover:
    """What one dispatch hands to the scheduler in one submit: a job, or every element of a sweep's array."""

    first: Job  # whose cluster, owner and rendered script the submit uses
    spec: JobSpec
    attempts: int
    group_id: int | None = None  # the sweep, for an array

    @property
    def noun(self) -> str:
        return "job" if self.group_id is None else "array"

    def locked_view(self) -> list[Job]:
        """The jobs of this handover, read without locks (for notes)."""
        if self.group_id is None:
            return [self.first]
        return list(Job.objects.filter(group_id=self.group_id, state=JobState.SUBMITTING))

    def locked(self) -> list[Job]:
        if self.group_id is None:
            return [locks.job(self.first.pk)]
        return locks.group_jobs(self.group_id, submitting_only=True)

    def scheduler_id(self, backend, submitted: str, job: Job) -> str:
        return submitted if self.group_id is None else backend.element_id(submitted, job.array_index)

    def recorded_reason(self, submitted: str, found: bool) -> str:
        after = " (found after a lost reply)" if found else ""
        if self.group_id is None:
            return f"scheduler id {submitted}{after}"
        return f"an element of scheduler array {submitted}{after}"


def _lease_time() -> timedelta:
    return timedelta(seconds=settings.KAKEHASHI_DISPATCH_LEASE_SECONDS)


def dispatch_job(job_id: int) -> DispatchOutcome:
    """Hand a queued job to its scheduler, exactly once, however often this runs.

    On a cluster reached over SSH it takes along the other jobs queued for the same account (docs/decisions/
    0022): each under its own lease, submitted over concurrent channels of the one pooled connection, recorded
    together; then, if the batch was full, it looks for more. The outcome is this job's.
    """
    with transaction.atomic():
        batch = locks.job_and_queued_siblings(job_id, batch_size(), batched_kinds())
        if batch:
            job = batch[0]
            array_of = job.group_id if job.array_index is not None else None
            leased = None if array_of else _lease_jobs(job, batch[1:])
    if not batch:
        # Its row is held elsewhere (a cancel, another attempt): wait for it alone, having let go of any sibling
        # that statement locked (waiting while holding them could close a cycle with a bulk cancel).
        with transaction.atomic():
            job = locks.job(job_id, for_dispatch=True)
            array_of = job.group_id if job.array_index is not None else None
            leased = None if array_of else _lease_jobs(job, [])
    if array_of is not None:
        # An element of a sweep submitted as one scheduler array: the whole array goes at once.
        return dispatch_array(array_of)
    if isinstance(leased, DispatchOutcome):
        return leased
    outcome = _hand_over_jobs(leased)[job.pk]
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


def _lease_jobs(job: Job, siblings: list[Job]) -> list[Job] | DispatchOutcome:
    """Move the locked job and its locked queued siblings to SUBMITTING, each under its own lease and attempt
    count: the jobs this attempt hands over (the job first), or why it must not."""
    now = timezone.now()
    if job.state not in WAITING:
        return DispatchOutcome("skipped", f"job is {job.state}")
    if job.state == JobState.SUBMITTING and job.dispatch_lease_until and job.dispatch_lease_until > now:
        return DispatchOutcome("busy", "another attempt holds this job")
    if getattr(job, "has_datasets", True):
        siblings = []  # staging reads the database while it copies: a job with datasets goes alone
    jobs = [job, *siblings]
    for j in jobs:
        j.dispatch_attempts += 1
    lease = now + _lease_time()
    queued = [j for j in jobs if j.state == JobState.QUEUED]
    transitions.transition_many(queued, JobState.SUBMITTING, reason="handing to the scheduler",
                                also=["dispatch_attempts"], dispatch_lease_until=lease)
    if job.state == JobState.SUBMITTING and job not in queued:
        # Left by an attempt that died: take over, but look before submitting (its attempt count says so).
        transitions.update([job], dispatch_lease_until=lease, dispatch_attempts=job.dispatch_attempts)
    return jobs


def _more_rounds(job: Job) -> None:
    """While full batches keep waiting for the same account, hand them over too (this worker holds the cluster's
    slot), for at most a third of a lease; jobs whose own task comes later find them taken."""
    deadline = time.monotonic() + settings.KAKEHASHI_DISPATCH_LEASE_SECONDS / 3
    while time.monotonic() < deadline:
        with transaction.atomic():
            jobs = locks.queued_of(job.cluster_id, job.user_id, job.project_id, batch_size())
            leased = _lease_jobs(jobs[0], jobs[1:]) if jobs else None
        if not isinstance(leased, list) or not leased:
            return
        _hand_over_jobs(leased)
        if len(leased) < batch_size():
            return


def _hand_over_jobs(jobs: list[Job]) -> dict[int, DispatchOutcome]:
    """Submit leased jobs of one account (concurrent channels when there are several) and record the answers in
    one transaction: the ids with one compare-and-swap on the jobs still SUBMITTING, refusals failed, the rest's
    lease released for a retry (re-sent in 5 s; the first job's retry is its task's)."""
    first = jobs[0]
    try:
        backend = backend_for(first.cluster, _account(first))
    except (BackendError, TransportError, NoClusterAccount) as exc:
        return _record(jobs, {job.pk: exc for job in jobs})
    # Specs are built here, in the thread that owns the database connection; the channels only talk SSH.
    handovers = [_Handover(job, build_spec(job, group=job.allocation_group or ""), job.dispatch_attempts)
                 for job in jobs]

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
        with ThreadPoolExecutor(max_workers=min(len(jobs), settings.KAKEHASHI_SSH_CHANNELS)) as pool:
            answers = list(pool.map(submit, handovers))
    return _record(jobs, dict(zip([job.pk for job in jobs], answers, strict=True)))


def _record(jobs: list[Job], answers: dict) -> dict[int, DispatchOutcome]:
    outcomes: dict[int, DispatchOutcome] = {}
    retry_later: list[int] = []
    with transaction.atomic():
        now = timezone.now()
        moves = []
        for job in jobs:
            answer = answers[job.pk]
            if not isinstance(answer, Exception):
                submitted, found = answer
                after = " (found after a lost reply)" if found else ""
                moves.append(transitions.Move(job, JobState.PENDING, f"scheduler id {submitted}{after}", {
                    "scheduler_id": submitted, "submitted_at": now, "dispatch_lease_until": None, "last_seen_at": now}))
        # The ids: one compare-and-swap for all (a job that left SUBMITTING meanwhile records nothing).
        made = {move.job.pk for move in transitions.transition_each_if(moves, JobState.SUBMITTING)}
        for move in moves:
            job, (submitted, found) = move.job, answers[move.job.pk]
            if job.pk in made:
                outcomes[job.pk] = DispatchOutcome("found" if found else "submitted", submitted)
                if job.cancel_requested_at is not None:
                    enqueue_on_commit(CANCEL_JOB, job.pk)
            else:
                state = Job.objects.filter(pk=job.pk).values_list("state", flat=True).first()
                log.error("job %s left SUBMITTING while being submitted (now %s, id %s)", job.pk, state, submitted)
                outcomes[job.pk] = DispatchOutcome("skipped", f"job is {state}")
        failed = [job.pk for job in jobs if isinstance(answers[job.pk], Exception)]
        for job in locks.dispatched(failed) if failed else []:
            answer = answers[job.pk]
            if job.state != JobState.SUBMITTING:
                outcomes[job.pk] = DispatchOutcome("skipped", f"job is {job.state}")
            elif isinstance(answer, DataRefused):
                transitions.transition(job, JobState.FAILED, reason=f"the job's data could not be staged: {answer}",
                                       ended_at=now)
                outcomes[job.pk] = DispatchOutcome("refused", str(answer))
            elif isinstance(answer, SubmitRefused):
                transitions.transition(job, JobState.FAILED, reason=f"the scheduler refused the job: {answer}",
                                       ended_at=now)
                outcomes[job.pk] = DispatchOutcome("refused", str(answer))
            else:
                # Release the lease so the retry (or the recovery sweep) may take over at once.
                transitions.update([job], dispatch_lease_until=None,
                                   state_reason=f"could not reach the scheduler yet, will retry: {answer}")
                outcomes[job.pk] = DispatchOutcome("retry", str(answer))
                if job.pk != jobs[0].pk:
                    retry_later.append(job.pk)
        for job_id in retry_later:
            enqueue_on_commit(DISPATCH_JOB, job_id, countdown=5)
    return outcomes


def dispatch_array(group_id: int) -> DispatchOutcome:
    """Hand a sweep's waiting elements to the scheduler as one array, exactly once, however often this runs.

    The elements move together: all SUBMITTING under one lease, then all PENDING with their element ids. One
    cancelled before the submit is still an index of the array (the script numbers them all), so it is
    deleted on the scheduler right after.
    """
    with transaction.atomic():
        jobs = locks.group_jobs(group_id)
        refused, attempts = _lease([j for j in jobs if j.state in WAITING], "array",
                                   nothing="no element of the array is waiting")
    if refused is not None:
        return refused
    group = JobGroup.objects.get(pk=group_id)
    jobs.sort(key=lambda j: j.array_index)
    for job in jobs:
        job.group = group  # whose script the elements share
    spec = build_array_spec(jobs, group.scheduler_name, group.remote_dir)
    return _hand_over(_Handover(jobs[0], spec, attempts, group_id=group_id))


def _lease(waiting: list[Job], noun: str, *, nothing: str) -> tuple[DispatchOutcome | None, int]:
    """Move locked waiting jobs to SUBMITTING under one lease: (None, the attempt's number), or (why this attempt
    must not submit them, 0)."""
    now = timezone.now()
    if not waiting:
        return DispatchOutcome("skipped", nothing), 0
    if any(j.state == JobState.SUBMITTING and j.dispatch_lease_until and j.dispatch_lease_until > now
           for j in waiting):
        return DispatchOutcome("busy", f"another attempt holds this {noun}"), 0
    attempts = max(j.dispatch_attempts for j in waiting) + 1
    lease = {"dispatch_lease_until": now + _lease_time(), "dispatch_attempts": attempts}
    queued = [j for j in waiting if j.state == JobState.QUEUED]
    reason = "handing to the scheduler" if noun == "job" else "handing the array to the scheduler"
    transitions.transition_many(queued, JobState.SUBMITTING, reason=reason, **lease)
    # Those already SUBMITTING were left by an attempt that died: take over, but look before submitting.
    transitions.update([j for j in waiting if j not in queued], **lease)
    return None, attempts


def _hand_over(handover: _Handover) -> DispatchOutcome:
    first = handover.first
    try:
        backend = backend_for(first.cluster, _account(first))
        existing = backend.find(handover.spec) if handover.attempts > 1 else None
        if not existing:
            spec = _staged(backend, handover)
            submitted = backend.submit(spec, first.rendered_script)
        else:
            submitted = existing
    except DataRefused as exc:
        with transaction.atomic():
            for job in handover.locked():
                if job.state == JobState.SUBMITTING:
                    transitions.transition(job, JobState.FAILED, reason=f"the job's data could not be staged: {exc}",
                                           ended_at=timezone.now())
        return DispatchOutcome("refused", str(exc))
    except SubmitRefused as exc:
        with transaction.atomic():
            for job in handover.locked():
                if job.state == JobState.SUBMITTING:
                    transitions.transition(job, JobState.FAILED, reason=f"the scheduler refused the {handover.noun}: {exc}",
                                           ended_at=timezone.now())
        return DispatchOutcome("refused", str(exc))
    except (BackendError, TransportError, NoClusterAccount, ObjectStoreError) as exc:
        with transaction.atomic():
            # Release the lease so the retry (or the recovery sweep) may take over at once.
            transitions.update([j for j in handover.locked() if j.state == JobState.SUBMITTING],
                               dispatch_lease_until=None, state_reason=f"could not reach the scheduler yet, will retry: {exc}")
        return DispatchOutcome("retry", str(exc))

    with transaction.atomic():
        now = timezone.now()
        pending = {"reason": handover.recorded_reason(submitted, bool(existing)), "submitted_at": now,
                   "dispatch_lease_until": None, "last_seen_at": now}
        if handover.group_id is None:
            # A compare-and-swap in one statement (lock, check, move, event): if the job left SUBMITTING meanwhile
            # (an attempt that took over after the lease ran out recorded it), this one records nothing.
            if not transitions.transition_if(first, JobState.SUBMITTING, JobState.PENDING,
                                             scheduler_id=submitted, **pending):
                state = Job.objects.filter(pk=first.pk).values_list("state", flat=True).first()
                log.error("job %s left SUBMITTING while being submitted (now %s, id %s)", first.pk, state, submitted)
                return DispatchOutcome("skipped", f"job is {state}")
            submitting, dropped = [first], []
        else:
            JobGroup.objects.filter(pk=handover.group_id).update(scheduler_id=submitted)
            submitting = [j for j in handover.locked() if j.state == JobState.SUBMITTING]
            for job in submitting:
                job.scheduler_id = handover.scheduler_id(backend, submitted, job)
            transitions.transition_many(submitting, JobState.PENDING, also=["scheduler_id"], **pending)
            dropped = list(Job.objects.filter(group_id=handover.group_id, state=JobState.CANCELLED, scheduler_id=""))
        cancel_wanted = [job.pk for job in submitting if job.cancel_requested_at is not None]
    for job_id in cancel_wanted:
        enqueue(CANCEL_JOB, job_id)
    for job in dropped:
        _delete_dropped_element(backend, job, submitted)
    return DispatchOutcome("found" if existing else "submitted", submitted)


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
            transitions.update([j for j in handover.locked() if j.state == JobState.SUBMITTING],
                               dispatch_lease_until=timezone.now() + _lease_time())

    spec, report = backend.stage_data(handover.spec, first.project.slug, data_inputs(attached, first.cluster),
                                      heartbeat=renew_lease)
    names = ", ".join(d.name for d in attached)
    for job in handover.locked_view():
        events.noted(job, f"staged dataset(s) {names}: {report.summary()}")
    return spec


def _delete_dropped_element(backend, job: Job, array_id: str) -> None:
    """An element cancelled before the array was submitted must not run (nor cost) anyway."""
    element = backend.element_id(array_id, job.array_index)
    try:
        backend.cancel(element)
    except (BackendError, TransportError) as exc:
        log.warning("could not delete element %s of cancelled job %s: %s", element, job.pk, exc)
        events.noted(job, f"cancelled before submission, but deleting its element {element} of the array failed: {exc}")
    else:
        events.noted(job, f"deleted its element {element} of the array, cancelled before submission")


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
