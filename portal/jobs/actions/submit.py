"""Submit: a checked request becomes a recorded job with its estimate reserved, dispatched once committed.

Flow: `submit_job` (web request or API: validate, render, record, reserve, enqueue) → `dispatch_job` (Celery task:
hand it to the scheduler exactly once) → `tracking.track_cluster` (beat: one status query per cluster per cycle,
final state from accounting, cost settled) → `outputs.fetch_output` (logs and outputs/ brought home).
"""

from __future__ import annotations

import uuid as uuid_mod
from dataclasses import dataclass, field
from decimal import Decimal

from django.db import IntegrityError, transaction

from backends.base import InvalidJobSpec
from portal.budgets import actions as budgets
from portal.budgets.display import amount_text
from portal.clusters.connect import NoClusterAccount, account_for, job_dir, renderer_for
from portal.enqueue import DISPATCH_JOB, enqueue_on_commit
from portal.jobs import events, transitions
from portal.jobs.actions.validation import (
    BudgetRefused,
    JobRequest,
    SubmitError,
    checked_payload,
    checked_size,
    granted_allocation,
    rendered,
)
from portal.jobs.models import Job
from portal.jobs.specs import build_spec, group_for, scheduler_name
from portal.projects import access
from portal.projects.models import Project
from portal.storage import datasets as storage_datasets
from portal.storage.errors import StorageError


@dataclass
class Submission:
    job: Job
    script: str
    estimate: budgets.Money | None
    created: bool = True
    warnings: list[str] = field(default_factory=list)

    @classmethod
    def recorded(cls, job: Job) -> Submission:
        """A job recorded earlier, as its submission answered (the same key or form asked again)."""
        return cls(job, job.rendered_script, job.estimate, created=False)


def prepare_job(user, req: JobRequest, *, require_account: bool = True, lookups: dict | None = None) -> Submission:
    """Validate a request and render its script without saving anything (the dry run and the preview).

    A preview may go ahead without a linked cluster account (it then carries a warning); a submit may not.
    `lookups`: a dict shared by the jobs of one request (a batch), so that jobs asking for the same project,
    hardware and software read the membership, the grant and the account once (the answers cannot differ within
    one request; every job is still checked against them).
    """
    memo = lookups if lookups is not None else {}
    _looked_up(memo, ("role", req.project.pk), lambda: access.require(user, req.project, "submit"))
    # A notebook's software check reads the notebook itself: such a job is never answered from another's lookup.
    grant_key = None if req.notebook is not None else (
        "grant", req.project.pk, getattr(req.hardware, "pk", None), getattr(req.cluster, "pk", None),
        getattr(req.software, "pk", None), req.template, req.launcher)
    cluster, hw, allocation = _looked_up(memo, grant_key, lambda: granted_allocation(req))
    walltime = checked_size(req, cluster, hw)
    launcher, script = checked_payload(req)
    warnings: list[str] = []
    try:
        account = _looked_up(memo, ("account", cluster.pk, req.project.pk), lambda: account_for(cluster, user, req.project))
    except NoClusterAccount as exc:
        if require_account:
            raise SubmitError(str(exc), field="hardware") from None
        account = None
        warnings.append(str(exc))

    try:
        attached = storage_datasets.attachable(req.project, req.datasets)
        storage_datasets.check_cluster(attached, cluster)
    except StorageError as exc:
        raise SubmitError(exc.message, field="datasets") from None

    job_uuid = req.uuid or uuid_mod.uuid4()
    name = scheduler_name(job_uuid, req.name)
    job = Job(
        uuid=job_uuid, project=req.project, user=user, cluster=cluster, hardware=hw, software=req.software,
        name=req.name, kind=Job.Kind.NOTEBOOK if req.notebook is not None else Job.Kind.SCRIPT, nodes=req.nodes,
        walltime_seconds=walltime, launcher=launcher, script=script, template=req.template,
        procs_per_node=req.procs_per_node, working_directory=req.working_directory, notebook=req.notebook,
        parameters=req.parameters or {}, env=req.env or {}, scheduler_name=name, remote_dir=job_dir(cluster, name),
        account_username=account.username if account else "", cluster_account=account,
    )
    job.attached_datasets = attached
    job.rendered_script, job.submit_command = rendered(renderer_for(cluster), build_spec(job, group=allocation.group),
                                                       req.edited_script)

    # What the budget had left as the grant was read: a submit it cannot cover is refused before it is recorded.
    job.budget_before = budgets.balance_of_figures(
        {name: getattr(allocation, f"budget_{name}") for name in budgets.BUDGET_FIGURES})
    estimate = None
    if hw is not None:
        unit = allocation.budget_unit or hw.rate_unit  # priced in the budget's unit, where the project has one
        try:
            estimate = budgets.cost(hw.rate, hw.rate_unit, req.nodes, walltime, unit)
        except budgets.NoConversion as exc:
            raise SubmitError(str(exc), field="hardware") from None
        job.estimate_amount, job.estimate_unit = estimate.amount, estimate.unit
    return Submission(job=job, script=job.rendered_script, estimate=estimate, created=False, warnings=warnings)


def _looked_up(memo: dict, key, lookup):
    """`lookup()`, once per key within one request (a key of None: always asked)."""
    if key is None:
        return lookup()
    if key not in memo:
        memo[key] = lookup()
    return memo[key]


def submit_job(user, req: JobRequest, *, dry_run: bool = False, idempotency_key: str | None = None) -> Submission:
    """Validate, render, and (unless dry_run) record the job, reserve its estimate and enqueue its dispatch."""
    if idempotency_key:
        existing = Job.objects.filter(user=user, idempotency_key=idempotency_key).first()
        if existing is not None:
            return Submission.recorded(existing)
    if req.uuid is not None:
        existing = Job.objects.filter(uuid=req.uuid, user=user).first()
        if existing is not None:  # the same form posted twice
            return Submission.recorded(existing)
    prepared = prepare_job(user, req, require_account=not dry_run)
    if dry_run:
        return prepared
    job = prepared.job
    job.idempotency_key = idempotency_key or None
    try:
        with transaction.atomic():
            # The audit row goes in with the job and its first event (one statement on PostgreSQL).
            balance = record_jobs([job], events.submitted(user), dispatch=[job], audit={
                "action": "job.submit", "project": job.project, "data": {"estimate": str(job.estimate_amount)}})
    except IntegrityError:
        # Two requests with the same idempotency key or form id raced: the first one won.
        existing = Job.objects.filter(user=user, idempotency_key=idempotency_key).first() if idempotency_key else None
        existing = existing or Job.objects.filter(uuid=job.uuid, user=user).first()
        if existing is None:
            raise
        return Submission.recorded(existing)
    return Submission(job, job.rendered_script, prepared.estimate, created=True,
                      warnings=_budget_warnings(job.project, balance))


def record_jobs(jobs: list[Job], first: events.Event, *, dispatch: list[Job],
                audit: dict | None = None) -> budgets.BudgetSummary | None:
    """Save prepared jobs of one project with their first event (and an audit row each, with `audit`: record's
    action, project and data) and one reservation for all of them (all fit a strict budget or none is recorded),
    and dispatch `dispatch` once committed. In a transaction. The project's budget after the reservation (None: it
    has none, or nothing was priced)."""
    project = jobs[0].project
    estimates = [(j, j.estimate_amount) for j in jobs if j.estimate_amount is not None]
    try:
        budgets.refuse_unless_it_fits(project, len(estimates), sum((a for _, a in estimates), Decimal(0)),
                                      getattr(jobs[0], "budget_before", None))
        transitions.record_new(jobs, first, audit=audit)
        for job in jobs:
            if getattr(job, "attached_datasets", None):
                job.datasets.set(job.attached_datasets)
        balance = budgets.reserve_many(project, estimates, actor=first.actor)
    except budgets.BudgetExceeded as exc:
        raise BudgetRefused(str(exc), field="walltime") from None
    for job in dispatch:
        enqueue_on_commit(DISPATCH_JOB, job.pk)
    return balance


def _budget_warnings(project: Project, balance: budgets.BudgetSummary | None) -> list[str]:
    """A soft budget's overspend, from the balance the reservation returned (no query of its own)."""
    if balance is None or balance.strict:  # a strict budget refuses instead of warning
        return []
    if balance.available < 0:
        return [f"project {project.slug} is over its (soft) budget by {amount_text(-balance.available)} {balance.unit}"]
    return []


def edit_for_clone(source: Job, job_uuid: uuid_mod.UUID) -> str | None:
    """The advanced edit a clone carries, when `source`'s submitted script was edited: that script with the source's
    own names (its uuid and scheduler name, which the job's directory and log names derive from) replaced by the
    clone's, so the clone is the same job (issue 25). None when the source ran the script its form rendered."""
    if source.group_id is not None or not source.rendered_script:
        return None
    try:
        unedited = renderer_for(source.cluster).render(build_spec(source, group=group_for(source.project, source.cluster)))
    except InvalidJobSpec:
        return None
    if unedited.strip() == source.rendered_script.strip():
        return None
    clone_name = scheduler_name(job_uuid, source.name)
    return (source.rendered_script.replace(source.scheduler_name, clone_name)
            .replace(source.uuid.hex, job_uuid.hex).replace(str(source.uuid), str(job_uuid)))
