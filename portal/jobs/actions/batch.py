"""Bulk submit: many independent jobs recorded by one request, all or none (issue 28, goal 4; docs/decisions/0053).

A script that submits 200 jobs pays 200 requests' authentication, throttling and transaction otherwise. Here each
job is still checked as a submit checks it (membership, grant, size, payload, account, datasets, estimate), is its
own row with its own first event, audit row, reservation and dispatch task; what one request shares is the lookups
that cannot differ between its jobs, the transaction, and the budget's row lock (one reservation per project for all
of that project's jobs). Any refusal records nothing.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from django.db import IntegrityError, transaction

from portal.jobs import events
from portal.jobs.actions.submit import Submission, _budget_warnings, prepare_job, record_jobs
from portal.jobs.actions.validation import JobRequest, SubmitError
from portal.jobs.models import Job

MAX_BATCH_JOBS = 500  # one request's transaction and answer stay bounded (~1 s of recording at 500 on 2 cores)


@dataclass
class BatchSubmission:
    submissions: list[Submission]
    created: bool = True  # False: the same Idempotency-Key asked again; these are the jobs recorded the first time
    warnings: list[str] = field(default_factory=list)

    @property
    def jobs(self) -> list[Job]:
        return [s.job for s in self.submissions]


def batch_keys(idempotency_key: str, count: int) -> list[str]:
    """Each job's own idempotency key, derived from the batch's: a replay finds every job by its key, and two
    batches, or a batch and a single submit, never share one. Hashed so that any header (≤ 128 characters) fits."""
    digest = hashlib.sha256(idempotency_key.encode()).hexdigest()[:40]
    return [f"batch:{digest}:{i}" for i in range(count)]


def submit_jobs(user, requests: list[JobRequest], *, idempotency_key: str | None = None) -> BatchSubmission:
    """Check every request as `submit_job` does, then record them all in one transaction (each job its own row,
    first event, audit row and reservation; dispatched once committed), or none: the first refusal is raised as a
    SubmitError whose field names the job (`jobs[3].hardware`), a strict budget that cannot cover the whole batch
    as BudgetRefused, a project the user may not submit in as PermissionDenied."""
    if not requests:
        raise SubmitError("a batch needs at least one job", field="jobs")
    if len(requests) > MAX_BATCH_JOBS:
        raise SubmitError(f"a batch holds at most {MAX_BATCH_JOBS} jobs, not {len(requests)}", field="jobs")
    keys = batch_keys(idempotency_key, len(requests)) if idempotency_key else [None] * len(requests)
    if idempotency_key:
        replayed = _recorded(user, keys)
        if replayed is not None:
            return replayed
    lookups: dict = {}
    prepared: list[Submission] = []
    for index, req in enumerate(requests):
        try:
            prepared.append(prepare_job(user, req, lookups=lookups))
        except SubmitError as exc:
            raise type(exc)(f"job {index} ({req.name}): {exc.message}",
                            field=f"jobs[{index}].{exc.field}" if exc.field else f"jobs[{index}]") from None
    by_project: dict[int, list[Job]] = {}
    for submission, key in zip(prepared, keys, strict=True):
        submission.job.idempotency_key = key
        by_project.setdefault(submission.job.project_id, []).append(submission.job)
    balances = {}
    try:
        with transaction.atomic():
            # Projects in primary-key order: their budget rows are locked in one order by every batch (no deadlock).
            for project_id in sorted(by_project):
                jobs = by_project[project_id]
                balances[project_id] = record_jobs(jobs, events.submitted(user), dispatch=jobs, audit={
                    "action": "job.submit", "project": jobs[0].project,
                    # Each audit row names its job, whose own estimate is on its row; the batch says how many went.
                    "data": {"batch": len(requests)}})
    except IntegrityError:
        # Two requests with the same key raced: the first one won.
        replayed = _recorded(user, keys) if idempotency_key else None
        if replayed is None:
            raise
        return replayed
    for submission in prepared:
        submission.created = True
    warnings = [w for project_id, jobs in sorted(by_project.items())
                for w in _budget_warnings(jobs[0].project, balances[project_id])]
    return BatchSubmission(prepared, created=True, warnings=warnings)


def _recorded(user, keys: list[str]) -> BatchSubmission | None:
    """The batch recorded earlier under these keys (all of it: batches are all or none), or None."""
    found = {job.idempotency_key: job for job in Job.objects.filter(user=user, idempotency_key__in=keys)
             .select_related("project", "user", "cluster", "hardware", "software")}
    if not found:
        return None
    return BatchSubmission([Submission.recorded(found[key]) for key in keys if key in found], created=False)
