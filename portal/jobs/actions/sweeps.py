"""Sweeps: one job description expanded into a job per grid point, recorded together (docs/decisions/0005).

Where the scheduler has arrays the points become the elements of one array job, rendered once; everywhere
else each point is a job of its own. Either way each point is a Job with its own parameters, state, logs, cost
and cancel, and the whole sweep fits the budget or none of it is recorded.
"""

from __future__ import annotations

import copy
import itertools
import json
import uuid as uuid_mod
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any

from django.db import IntegrityError, transaction

from backends.base import element_dir
from portal.audit.actions import record
from portal.budgets.actions import Money
from portal.clusters.connect import job_dir, renderer_for
from portal.jobs import events
from portal.jobs.actions.submit import Submission, prepare_job, record_jobs
from portal.jobs.actions.validation import JobRequest, SubmitError, checked_edit, rendered
from portal.jobs.models import Job, JobGroup, JobState
from portal.jobs.specs import build_array_spec, build_spec, group_for, scheduler_name

MAX_SWEEP_JOBS = 100


@dataclass
class SweepSubmission:
    group: JobGroup  # unsaved for a dry run
    submissions: list[Submission]
    array: bool = False  # one scheduler array, not a submit per job
    script: str = ""  # the array's job script (array mode), else the first job's
    created: bool = True  # False: the same key asked again, this is the sweep recorded the first time

    @property
    def jobs(self) -> list[Job]:
        return [submission.job for submission in self.submissions]

    @property
    def estimate_total(self) -> Decimal:
        return sum((s.estimate.amount for s in self.submissions if s.estimate), Decimal("0"))

    @property
    def estimate(self) -> Money | None:
        """What all of its jobs reserve (None where nothing is priced)."""
        unit = next((s.estimate.unit for s in self.submissions if s.estimate), None)
        return Money(self.estimate_total, unit) if unit else None


def expand_sweep(sweep: Any) -> list[dict[str, Any]]:
    """{"lr": [0.1, 0.01], "batch": [32, 64]} → the four points of the grid, in a stable order."""
    if not isinstance(sweep, dict) or not sweep:
        raise SubmitError("a sweep is an object of parameter name: list of values", field="sweep")
    for name, values in sweep.items():
        if not (isinstance(name, str) and name.isidentifier()):
            raise SubmitError(f"sweep parameter {name!r} is not a valid name (letters, digits, '_')", field="sweep")
        if not isinstance(values, list) or not values:
            raise SubmitError(f"sweep parameter {name} needs a non-empty list of values", field="sweep")
        if not all(isinstance(v, str | int | float | bool) for v in values):
            raise SubmitError(f"sweep parameter {name}: values must be numbers, text or true/false", field="sweep")
    count = 1
    for values in sweep.values():
        count *= len(values)
    if count > MAX_SWEEP_JOBS:
        raise SubmitError(f"this sweep expands to {count} jobs; at most {MAX_SWEEP_JOBS} at once", field="sweep")
    names = list(sweep)
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*(sweep[n] for n in names))]


def submit_sweep(user, req: JobRequest, sweep: Any, *, dry_run: bool = False, array: bool | None = None,
                 idempotency_key: str | None = None) -> SweepSubmission:
    """One job description expanded into a job per grid point, tracked as a group; all reserved or none.

    `array`: submit the sweep as one scheduler array (None: wherever the cluster's scheduler has arrays).
    Either way each point is a Job with its own parameters, state, logs, cost and cancel. The same key (the API's
    Idempotency-Key, else the form's draft id) asked again returns the sweep recorded the first time.
    """
    key = idempotency_key or (f"draft:{req.uuid}" if req.uuid else None)
    if key and not dry_run:
        existing = JobGroup.objects.filter(user=user, idempotency_key=key).first()
        if existing is not None:
            return sweep_of(existing)
    points = expand_sweep(sweep)
    width = len(str(len(points) - 1))
    names = [f"{req.name}-{i:0{width}d}"[:63] for i in range(len(points))]
    # Every check and the estimate once, on the first point: the points differ only in name and parameters.
    first = prepare_job(user, replace(req, name=names[0], parameters={**req.parameters, **points[0]}, uuid=None,
                                      edited_script=None),
                        require_account=not dry_run)
    cluster = first.job.cluster
    renderer = renderer_for(cluster)
    if array and not renderer.supports_arrays:
        raise SubmitError(f"{cluster.name}'s scheduler takes a sweep job by job, not as one array", field="sweep")
    as_array = renderer.supports_arrays and len(points) > 1 if array is None else bool(array)
    if not as_array:
        first.script = first.job.rendered_script = checked_edit(req.edited_script, first.script, renderer)
    scheduler_group = group_for(req.project, cluster)
    prepared = [first] + [
        _sibling(first, name, {**req.parameters, **point}, render=not as_array, edited_script=req.edited_script,
                 scheduler_group=scheduler_group)
        for name, point in zip(names[1:], points[1:], strict=True)
    ]
    group = JobGroup(project=req.project, user=user, name=req.name, sweep=sweep, array=as_array, idempotency_key=key)
    script = first.script
    if as_array:
        # The form's draft id names the array, so what was previewed is what is submitted.
        group.scheduler_name = scheduler_name(req.uuid or uuid_mod.uuid4(), req.name)
        script = _make_array(group, [p.job for p in prepared], req.edited_script)
        for submission in prepared:
            submission.script = script
    sweep_submission = SweepSubmission(group, prepared, array=as_array, script=script, created=False)
    if dry_run:
        return sweep_submission
    jobs = sweep_submission.jobs
    try:
        with transaction.atomic():
            group.save()
            for job in jobs:
                job.group = group
            record_jobs(jobs, events.submitted(user, sweep=group.name),
                        dispatch=jobs[:1] if as_array else jobs)  # an array goes in one dispatch
            record("job.sweep", actor=user, project=group.project, target=group, jobs=[j.pk for j in jobs],
                   array=as_array, estimate=str(sum((j.estimate_amount or 0 for j in jobs), Decimal("0"))))
    except IntegrityError:
        # The same key raced in two requests: the first one won.
        existing = JobGroup.objects.filter(user=user, idempotency_key=key).first() if key else None
        if existing is None:
            raise
        return sweep_of(existing)
    for submission in prepared:
        submission.created = True
    sweep_submission.created = True
    return sweep_submission


def _sibling(first: Submission, name: str, parameters: dict[str, Any], *, render: bool, edited_script: str | None,
             scheduler_group: str) -> Submission:
    """Another point of a sweep: the first point's checked job with its own name, parameters and ids (and its own
    script, unless it becomes an element of an array whose one script is rendered later)."""
    # A copy of the unsaved first point (Django copies its state and the related rows it already loaded: no query
    # per point), not a model built from 50 keyword arguments per point (a 1,000-point sweep's Python time).
    job = copy.copy(first.job)
    job.attached_datasets = getattr(first.job, "attached_datasets", [])
    job.uuid = uuid_mod.uuid4()
    job.name, job.parameters = name, parameters
    job.scheduler_name = scheduler_name(job.uuid, name)
    job.remote_dir = job_dir(job.cluster, job.scheduler_name)
    if render:
        job.rendered_script, job.submit_command = rendered(
            renderer_for(job.cluster), build_spec(job, group=scheduler_group), edited_script, point=name
        )
    else:
        job.rendered_script = first.script
    return Submission(job=job, script=job.rendered_script, estimate=first.estimate, created=False,
                      warnings=first.warnings)


def sweep_of(group: JobGroup) -> SweepSubmission:
    """A recorded sweep as submit_sweep answers it (for a replayed key, the API and the pages)."""
    jobs = list(group.jobs.select_related("project", "user", "cluster", "hardware", "software")
                .order_by("array_index", "pk"))
    return SweepSubmission(group, [Submission.recorded(job) for job in jobs], array=group.array,
                           script=jobs[0].rendered_script if jobs else "", created=False)


RERUN_STATES = (JobState.FAILED, JobState.TIMED_OUT)


def point_key(job: Job) -> str:
    """What identifies a sweep's point: its parameters (a re-run is the same point again)."""
    return json.dumps(job.parameters or {}, sort_keys=True)


def points_to_rerun(group: JobGroup) -> list[Job]:
    """The latest attempt of each point, where it failed or ran out of time."""
    latest: dict[str, Job] = {}
    for job in group.jobs.select_related("project", "user", "cluster", "hardware", "software").order_by("pk"):
        latest[point_key(job)] = job
    return [job for job in latest.values() if job.state in RERUN_STATES]


def _rerun_name(name: str) -> str:
    base, _, attempt = name.rpartition("-r")
    if base and attempt.isdigit():
        return f"{base}-r{int(attempt) + 1}"[:63]
    return f"{name[:60]}-r1"


def rerun_failed(group: JobGroup, user) -> list[Job]:
    """"Re-run failed points": a new job in the same sweep for each point whose latest attempt failed or timed out,
    with its parameters, hardware, software and script, submitted job by job (an array already ran), all reserved
    or none (the usual submit checks apply: the user must still be allowed to submit in the project)."""
    failed = points_to_rerun(group)
    if not failed:
        raise SubmitError("no point of this sweep failed or ran out of time")
    prepared = []
    for job in failed:
        req = JobRequest(project=group.project, name=_rerun_name(job.name), script=job.script, hardware=job.hardware,
                         cluster=job.cluster, software=job.software, nodes=job.nodes, walltime=job.walltime_seconds,
                         launcher=job.launcher, env=dict(job.env or {}), template=job.template,
                         procs_per_node=job.procs_per_node, working_directory=job.working_directory,
                         notebook=job.notebook, parameters=dict(job.parameters or {}))
        new = prepare_job(user, req).job
        new.group = group
        prepared.append(new)
    with transaction.atomic():
        record_jobs(prepared, events.submitted(user, sweep=group.name, rerun=True), dispatch=prepared)
        # The sweep ends again when its new points have: its owner is told then.
        JobGroup.objects.filter(pk=group.pk).update(ended_told_at=None)
        record("job.sweep_rerun", actor=user, project=group.project, target=group,
               jobs=[j.pk for j in prepared], of=[j.pk for j in failed])
    return prepared


def _make_array(group: JobGroup, jobs: list[Job], edited_script: str | None) -> str:
    """Number the prepared jobs as elements of one array, render its script once and give it to each of them."""
    cluster = jobs[0].cluster
    group.remote_dir = job_dir(cluster, group.scheduler_name)
    for index, job in enumerate(jobs, 1):
        job.array_index = index
        job.scheduler_name = group.scheduler_name
        job.remote_dir = element_dir(group.remote_dir, index)
    spec = build_array_spec(jobs, group.scheduler_name, group.remote_dir)
    script, command = rendered(renderer_for(cluster), spec, edited_script)
    group.rendered_script = script  # kept once, by the group: its elements' rendered_script reads it
    for job in jobs:
        job.group, job.own_script, job.submit_command = group, "", command
    return script
