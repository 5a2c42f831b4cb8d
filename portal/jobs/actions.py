"""What happens to a Job from Submit on; each state change goes through `transitions.transition`.

Flow: `submit_job` (web request or API: validate, render, record, reserve, enqueue) → `dispatch_job` (Celery
task: hand it to the scheduler exactly once) → `tracking.track_cluster` (beat: one status query per cluster per
cycle, final state from accounting, cost settled) → `outputs.fetch_output` (logs and outputs/ brought home).
`request_cancel` records the wish and `cancel_on_scheduler` carries it out.
"""

from __future__ import annotations

import itertools
import json
import logging
import shlex
import uuid as uuid_mod
from dataclasses import dataclass, field, replace
from datetime import timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from backends.base import BackendError, InvalidJobSpec, SubmitRefused, element_dir
from backends.safety import bash_syntax_error, check_env, check_job_name, check_path, directive_lines
from backends.transport import TransportError
from portal.audit.actions import record
from portal.budgets import actions as budgets
from portal.budgets.models import Budget
from portal.catalog import job_templates
from portal.catalog.models import HardwareType, Software
from portal.clusters.connect import NoClusterAccount, account_for, backend_for, renderer_for
from portal.clusters.models import Allocation, Cluster, Kind
from portal.jobs.models import FINAL_STATES, Job, JobEvent, JobGroup, JobState
from portal.jobs.specs import build_array_spec, build_spec, group_for, remote_dir, scheduler_name
from portal.jobs.transitions import locked_job, transition, transition_many
from portal.jobs.validation import format_walltime, parse_walltime
from portal.projects import access
from portal.projects.models import Project

log = logging.getLogger(__name__)


class SubmitError(Exception):
    """A job that cannot be submitted as asked. The message tells the person what to change."""

    code = "invalid"

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message, self.field = message, field


class BudgetRefused(SubmitError):
    code = "budget_exceeded"


@dataclass
class JobRequest:
    project: Project
    name: str
    script: str = ""
    hardware: HardwareType | None = None
    cluster: Cluster | None = None  # only needed without hardware (the local cluster)
    software: Software | None = None
    nodes: int = 1
    walltime: str | int = "01:00:00"
    launcher: str | None = None  # None: the template's launcher, else run the script once
    env: dict[str, str] = field(default_factory=dict)
    template: str = ""
    procs_per_node: int = 0
    working_directory: str = ""
    notebook: dict[str, Any] | None = None
    parameters: dict[str, Any] = field(default_factory=dict)
    edited_script: str | None = None  # advanced mode: the user's edit of the rendered job script
    uuid: uuid_mod.UUID | None = None  # the preview's id, so what was previewed is what is submitted


@dataclass
class Submission:
    job: Job
    script: str
    estimate: budgets.Money | None
    created: bool = True
    warnings: list[str] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------- submit


def prepare_job(user, req: JobRequest, *, require_account: bool = True) -> Submission:
    """Validate a request and render its script without saving anything (the dry run and the preview).

    A preview may go ahead without a linked cluster account (it then carries a warning); a submit may not.
    """
    access.require(user, req.project, "submit")
    cluster, hw = _granted_cluster_and_hardware(req)
    walltime = _checked_size(req, cluster, hw)
    launcher, script = _checked_payload(req)
    warnings: list[str] = []
    try:
        account = account_for(cluster, user, req.project)
    except NoClusterAccount as exc:
        if require_account:
            raise SubmitError(str(exc), field="hardware") from None
        account = None
        warnings.append(str(exc))

    job_uuid = req.uuid or uuid_mod.uuid4()
    name = scheduler_name(job_uuid, req.name)
    job = Job(
        uuid=job_uuid,
        project=req.project,
        user=user,
        cluster=cluster,
        hardware=hw,
        software=req.software,
        name=req.name,
        kind=Job.Kind.NOTEBOOK if req.notebook is not None else Job.Kind.SCRIPT,
        nodes=req.nodes,
        walltime_seconds=walltime,
        launcher=launcher,
        script=script,
        template=req.template,
        procs_per_node=req.procs_per_node,
        working_directory=req.working_directory,
        notebook=req.notebook,
        parameters=req.parameters or {},
        env=req.env or {},
        scheduler_name=name,
        remote_dir=remote_dir(cluster, name),
        account_username=account.username if account else "",
    )
    renderer = renderer_for(cluster)
    try:
        spec = build_spec(job)
        script = renderer.render(spec)
        job.submit_command = shlex.join(renderer.submit_command(spec))
    except InvalidJobSpec as exc:
        raise SubmitError(str(exc)) from None
    job.rendered_script = script = _checked_edit(req.edited_script, script, renderer.directive_prefix)

    estimate = None
    if hw is not None:
        budget = Budget.objects.filter(project=req.project).first()
        unit = budget.unit if budget else hw.rate_unit
        try:
            estimate = budgets.cost(hw.rate, hw.rate_unit, req.nodes, walltime, unit)
        except budgets.NoConversion as exc:
            raise SubmitError(str(exc), field="hardware") from None
        job.estimate_amount, job.estimate_unit = estimate.amount, estimate.unit
    return Submission(job=job, script=script, estimate=estimate, created=False, warnings=warnings)


def _granted_cluster_and_hardware(req: JobRequest) -> tuple[Cluster, HardwareType | None]:
    """The cluster and hardware, if the project is granted them (and the software, if any, is there)."""
    cluster = req.hardware.cluster if req.hardware else req.cluster
    if cluster is None:
        raise SubmitError("choose the hardware to run on", field="hardware")
    if not cluster.enabled:
        raise SubmitError(f"{cluster.name} is switched off by the site admins", field="hardware")
    allocation = Allocation.objects.filter(project=req.project, cluster=cluster).first()
    if allocation is None:
        raise SubmitError(f"project {req.project.slug} has no allocation on {cluster.name}", field="hardware")
    hw = req.hardware
    if hw is None and cluster.kind != Kind.LOCAL:
        raise SubmitError(f"choose a hardware type of {cluster.name}", field="hardware")
    if hw is not None:
        if not hw.enabled:
            raise SubmitError(f"{hw.name} is not available at the moment", field="hardware")
        if allocation.hardware.exists() and not allocation.hardware.filter(pk=hw.pk).exists():
            raise SubmitError(f"project {req.project.slug} may not use {hw.name}", field="hardware")
    if req.software is not None:
        software_ok = req.software.enabled and req.software.clusters.filter(pk=cluster.pk).exists()
        restricted = req.software.projects.exists()
        if not software_ok or (restricted and not req.software.projects.filter(pk=req.project.pk).exists()):
            raise SubmitError(f"{req.software.name} is not available on {cluster.name} for this project", field="software")
    return cluster, hw


def _checked_size(req: JobRequest, cluster: Cluster, hw: HardwareType | None) -> int:
    """Name, walltime (in seconds, within the hardware's and the project's limits) and node count."""
    try:
        check_job_name(req.name)
    except InvalidJobSpec as exc:
        raise SubmitError(str(exc), field="name") from None
    try:
        walltime = parse_walltime(req.walltime)
    except ValidationError as exc:
        raise SubmitError(exc.messages[0], field="walltime") from None
    limits = []
    if hw is not None:
        limits.append((hw.max_walltime_hours * 3600, f"{hw.name} allows at most {hw.max_walltime_hours} h"))
    if req.project.max_walltime_hours:
        limits.append(
            (req.project.max_walltime_hours * 3600, f"project {req.project.slug} allows at most {req.project.max_walltime_hours} h")
        )
    for limit, why in limits:
        if walltime > limit:
            raise SubmitError(f"walltime {format_walltime(walltime)} is too long: {why}", field="walltime")
    max_nodes = hw.max_nodes if hw is not None else 1
    if not isinstance(req.nodes, int) or req.nodes < 1:
        raise SubmitError("nodes must be a whole number of at least 1", field="nodes")
    if req.nodes > max_nodes:
        raise SubmitError(f"{hw.name if hw else cluster.name} allows at most {max_nodes} node(s)", field="nodes")
    return walltime


def _checked_payload(req: JobRequest) -> tuple[str, str]:
    """(launcher, payload script): from the script, a template or a notebook; environment and paths checked."""
    template = job_templates.get(req.template)
    if req.template and template is None:
        raise SubmitError(f"unknown job template {req.template!r}; known: {', '.join(job_templates.TEMPLATES)}", field="template")
    launcher = req.launcher or (template.launcher if template else Job.Launcher.SCRIPT)
    # Browsers submit textareas with CRLF line ends: on a cluster every line would end in a stray \r.
    script = (req.script or "").replace("\r\n", "\n")
    if template is not None and not script.strip():
        script = template.script
    if req.notebook is not None:
        script = notebook_payload(req.notebook, req.parameters)
    else:
        if not script or not script.strip():
            raise SubmitError("the script is empty: write the commands the job should run", field="script")
        if len(script.encode()) > settings.KAKEHASHI_MAX_SCRIPT_BYTES:
            raise SubmitError(
                f"the script is larger than {settings.KAKEHASHI_MAX_SCRIPT_BYTES // 1024} KiB; put large code in files "
                "on shared storage and call them from a short script",
                field="script",
            )
        if syntax := bash_syntax_error(script):
            raise SubmitError(f"the script is not valid bash: {syntax}", field="script")
    if not isinstance(req.parameters, dict):
        raise SubmitError("parameters must be an object of name: value", field="parameters")
    try:
        check_env(req.env or {})
        if req.notebook is None:
            check_env({k: v if isinstance(v, str) else json.dumps(v) for k, v in req.parameters.items()})
    except InvalidJobSpec as exc:
        raise SubmitError(str(exc), field="parameters" if req.parameters else "env") from None
    try:
        check_path(req.working_directory, what="working directory")
    except InvalidJobSpec as exc:
        raise SubmitError(str(exc), field="working_directory") from None
    if launcher not in Job.Launcher.values:
        raise SubmitError(f"unknown launcher {launcher!r}: use script, torchrun or mpirun", field="launcher")
    if not isinstance(req.procs_per_node, int) or not 0 <= req.procs_per_node <= 1024:
        raise SubmitError("processes per node must be a whole number from 0 (one per GPU) to 1024", field="procs_per_node")
    return launcher, script


NOTEBOOK_OUTPUT = "outputs/notebook.ipynb"


def notebook_payload(notebook: Any, parameters: Any) -> str:
    """Check a notebook and its parameters; the payload that runs it headless with papermill."""
    import nbformat

    if not isinstance(notebook, dict):
        raise SubmitError("the notebook must be a Jupyter notebook (a JSON object), not " + type(notebook).__name__, field="notebook")
    try:
        nbformat.validate(nbformat.from_dict(notebook))
    except Exception as exc:  # noqa: BLE001 - nbformat raises several kinds; all mean "not a notebook"
        first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
        raise SubmitError(f"this is not a valid Jupyter notebook: {first}", field="notebook") from None
    if len(json.dumps(notebook).encode()) > settings.KAKEHASHI_MAX_NOTEBOOK_BYTES:
        raise SubmitError(
            f"the notebook is larger than {settings.KAKEHASHI_MAX_NOTEBOOK_BYTES // (1024 * 1024)} MiB; clear its outputs first",
            field="notebook",
        )
    if not isinstance(parameters, dict) or not all(isinstance(k, str) and k.isidentifier() for k in parameters):
        raise SubmitError("parameters must be an object whose keys are Python identifiers", field="parameters")
    # papermill reads parameters.json (JSON is YAML) and writes the executed notebook next to the outputs.
    return (
        f'papermill notebook.ipynb "$KAKEHASHI_JOB_DIR/{NOTEBOOK_OUTPUT}" -f parameters.json '
        '--cwd "$KAKEHASHI_JOB_DIR" --no-progress-bar --log-output\n'
    )


def _checked_edit(edited: str | None, rendered: str, prefix: str) -> str:
    """Advanced mode: the body may change, the directives may not (they follow from the form and the budget).

    The script to submit: `rendered` when there is no edit (or it changes nothing), else the checked edit.
    """
    if edited is None or edited.strip() == rendered.strip():
        return rendered
    if not edited.strip():
        raise SubmitError("the edited script is empty", field="edited_script")
    if "\0" in edited or len(edited.encode()) > settings.KAKEHASHI_MAX_SCRIPT_BYTES:
        raise SubmitError("the edited script is not text or is too large", field="edited_script")
    if not edited.startswith("#!"):
        raise SubmitError("the edited script must keep its first line (#!/bin/bash)", field="edited_script")
    if syntax := bash_syntax_error(edited):
        raise SubmitError(f"the edited script is not valid bash: {syntax}", field="edited_script")
    prefixes = {prefix, "#SBATCH", "#PBS", "#$", "#BSUB"} - {""}
    wanted = sorted(line for p in prefixes for line in directive_lines(rendered, p))
    got = sorted(line for p in prefixes for line in directive_lines(edited, p))
    if wanted != got:
        extra = sorted(set(got) - set(wanted))
        missing = sorted(set(wanted) - set(got))
        detail = "; ".join(
            ([f"added/changed: {', '.join(extra)}"] if extra else [])
            + ([f"removed: {', '.join(missing)}"] if missing else [])
        )
        raise SubmitError(
            "scheduler directives are set from the form (hardware, nodes, walltime) and cannot be edited here "
            f"— change the form instead ({detail})",
            field="edited_script",
        )
    return edited.replace("\r\n", "\n")


def submit_job(user, req: JobRequest, *, dry_run: bool = False, idempotency_key: str | None = None) -> Submission:
    """Validate, render, and (unless dry_run) record the job, reserve its estimate and enqueue its dispatch."""
    if idempotency_key:
        existing = Job.objects.filter(user=user, idempotency_key=idempotency_key).first()
        if existing is not None:
            return Submission(existing, existing.rendered_script, _estimate_of(existing), created=False)
    if req.uuid is not None:
        existing = Job.objects.filter(uuid=req.uuid, user=user).first()
        if existing is not None:  # the same form posted twice
            return Submission(existing, existing.rendered_script, _estimate_of(existing), created=False)
    prepared = prepare_job(user, req, require_account=not dry_run)
    if dry_run:
        return prepared
    job = prepared.job
    job.idempotency_key = idempotency_key or None
    try:
        with transaction.atomic():
            _record_job(job, user)
    except IntegrityError:
        # Two requests with the same idempotency key or form id raced: the first one won.
        existing = Job.objects.filter(user=user, idempotency_key=idempotency_key).first() if idempotency_key else None
        existing = existing or Job.objects.filter(uuid=job.uuid, user=user).first()
        if existing is None:
            raise
        return Submission(existing, existing.rendered_script, _estimate_of(existing), created=False)
    return Submission(job, job.rendered_script, prepared.estimate, created=True, warnings=_budget_warnings(job.project))


def _record_job(job: Job, user) -> None:
    """Save a prepared job, its first event and its reservation; dispatch once committed. In a transaction."""
    job.save()
    JobEvent.objects.create(job=job, from_state="", to_state=JobState.QUEUED, reason="submitted", actor=user)
    if job.estimate_amount is not None:
        try:
            budgets.reserve(job, job.estimate_amount, actor=user)
        except budgets.BudgetExceeded as exc:
            raise BudgetRefused(str(exc), field="walltime") from None
    record("job.submit", actor=user, project=job.project, target=job, estimate=str(job.estimate_amount))
    job_id = job.pk
    transaction.on_commit(lambda: _enqueue_dispatch(job_id))


def _budget_warnings(project: Project) -> list[str]:
    current_budget = Budget.objects.filter(project=project, strict=False).first()
    if current_budget is None:  # none, or strict: a strict budget refuses instead of warning
        return []
    summary = budgets.summary(current_budget)
    if summary.available < 0 and not summary.strict:
        return [f"project {project.slug} is over its (soft) budget by {-summary.available:.2f} {summary.unit}"]
    return []


MAX_SWEEP_JOBS = 100


@dataclass
class SweepSubmission:
    group: JobGroup  # unsaved for a dry run
    submissions: list[Submission]
    array: bool = False  # one scheduler array, not a submit per job
    script: str = ""  # the array's job script (array mode), else the first job's
    created: bool = True  # False: the same key asked again, this is the sweep recorded the first time

    @property
    def estimate_total(self) -> Decimal:
        return sum((s.estimate.amount for s in self.submissions if s.estimate), Decimal("0"))


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
        first.script = first.job.rendered_script = _checked_edit(req.edited_script, first.script,
                                                                 renderer.directive_prefix)
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
    if dry_run:
        return SweepSubmission(group, prepared, array=as_array, script=script, created=False)
    try:
        with transaction.atomic():
            group.save()
            _record_sweep(group, [p.job for p in prepared], user, dispatch_each=not as_array)
            for submission in prepared:
                submission.created = True
    except IntegrityError:
        # The same key raced in two requests: the first one won.
        existing = JobGroup.objects.filter(user=user, idempotency_key=key).first() if key else None
        if existing is None:
            raise
        return sweep_of(existing)
    return SweepSubmission(group, prepared, array=as_array, script=script)


def _sibling(first: Submission, name: str, parameters: dict[str, Any], *, render: bool, edited_script: str | None,
             scheduler_group: str) -> Submission:
    """Another point of a sweep: the first point's checked job with its own name, parameters and ids (and its own
    script, unless it becomes an element of an array whose one script is rendered later)."""
    job = Job(**{f.attname: getattr(first.job, f.attname) for f in Job._meta.concrete_fields
                 if f.name not in {"id", "uuid"}})
    # The related rows the first point already loaded: no query per point.
    job.project, job.user, job.cluster = first.job.project, first.job.user, first.job.cluster
    job.hardware, job.software = first.job.hardware, first.job.software
    job.uuid = uuid_mod.uuid4()
    job.name, job.parameters = name, parameters
    job.scheduler_name = scheduler_name(job.uuid, name)
    job.remote_dir = remote_dir(job.cluster, job.scheduler_name)
    script = first.script
    if render:
        renderer = renderer_for(job.cluster)
        try:
            script = renderer.render(build_spec(job, group=scheduler_group))
        except InvalidJobSpec as exc:
            raise SubmitError(f"sweep point {name}: {exc}", field="sweep") from None
        script = _checked_edit(edited_script, script, renderer.directive_prefix)
    job.rendered_script = script
    return Submission(job=job, script=script, estimate=first.estimate, created=False, warnings=first.warnings)


def _record_sweep(group: JobGroup, jobs: list[Job], user, *, dispatch_each: bool) -> None:
    """Save a sweep's jobs, their first events, one reservation for all and one audit row. In a transaction."""
    for job in jobs:
        job.group = group
    Job.objects.bulk_create(jobs)
    JobEvent.objects.bulk_create(
        JobEvent(job=job, from_state="", to_state=JobState.QUEUED, reason=f"submitted in sweep {group.name}", actor=user)
        for job in jobs
    )
    try:
        budgets.reserve_many(group.project, [(j, j.estimate_amount) for j in jobs if j.estimate_amount is not None],
                             actor=user)
    except budgets.BudgetExceeded as exc:
        raise BudgetRefused(str(exc), field="walltime") from None
    record("job.sweep", actor=user, project=group.project, target=group, jobs=[j.pk for j in jobs], array=group.array,
           estimate=str(sum((j.estimate_amount or 0 for j in jobs), Decimal("0"))))
    job_ids = [job.pk for job in jobs] if dispatch_each else [jobs[0].pk]  # an array goes in one dispatch
    transaction.on_commit(lambda: [_enqueue_dispatch(job_id) for job_id in job_ids])


def sweep_of(group: JobGroup) -> SweepSubmission:
    """A recorded sweep as submit_sweep answers it (for a replayed key, the API and the pages)."""
    jobs = list(group.jobs.select_related("project", "user", "cluster", "hardware", "software")
                .order_by("array_index", "pk"))
    submissions = [Submission(job, job.rendered_script, _estimate_of(job), created=False) for job in jobs]
    return SweepSubmission(group, submissions, array=group.array, script=jobs[0].rendered_script if jobs else "",
                           created=False)


def _make_array(group: JobGroup, jobs: list[Job], edited_script: str | None) -> str:
    """Number the prepared jobs as elements of one array, render its script once and give it to each of them."""
    cluster = jobs[0].cluster
    group.remote_dir = remote_dir(cluster, group.scheduler_name)
    for index, job in enumerate(jobs, 1):
        job.array_index = index
        job.scheduler_name = group.scheduler_name
        job.remote_dir = element_dir(group.remote_dir, index)
    renderer = renderer_for(cluster)
    try:
        spec = build_array_spec(jobs, group.scheduler_name, group.remote_dir)
        script = renderer.render(spec)
    except InvalidJobSpec as exc:
        raise SubmitError(str(exc)) from None
    script = _checked_edit(edited_script, script, renderer.directive_prefix)
    command = shlex.join(renderer.submit_command(spec))
    for job in jobs:
        job.rendered_script, job.submit_command = script, command
    return script


def _estimate_of(job: Job) -> budgets.Money | None:
    if job.estimate_amount is None:
        return None
    return budgets.Money(job.estimate_amount, job.estimate_unit)


def _enqueue_dispatch(job_id: int) -> None:
    from portal.jobs.tasks import dispatch_job_task

    dispatch_job_task.delay(job_id)


# ----------------------------------------------------------------------------------------------- dispatch


@dataclass
class DispatchOutcome:
    status: str  # submitted | found | refused | skipped | busy | retry
    detail: str = ""


def _lease() -> timedelta:
    return timedelta(seconds=settings.KAKEHASHI_DISPATCH_LEASE_SECONDS)


def dispatch_job(job_id: int) -> DispatchOutcome:
    """Hand a queued job to its scheduler, exactly once, however often this runs."""
    now = timezone.now()
    with transaction.atomic():
        job = locked_job(job_id)
        array_group = job.group_id if job.array_index is not None else None
        if array_group is None:
            refused = _take_dispatch_lease(job, now)
            if refused is not None:
                return refused
        attempts = job.dispatch_attempts
    if array_group is not None:
        # An element of a sweep submitted as one scheduler array: the whole array goes at once.
        return dispatch_array(array_group)

    spec = build_spec(job)
    try:
        account = account_for(job.cluster, job.user, job.project)
        backend = backend_for(job.cluster, account)
        existing = backend.find(spec) if attempts > 1 else None
        scheduler_id = existing or backend.submit(spec, job.rendered_script)
    except SubmitRefused as exc:
        with transaction.atomic():
            job = locked_job(job_id)
            if job.state == JobState.SUBMITTING:
                transition(job, JobState.FAILED, reason=f"the scheduler refused the job: {exc}", ended_at=timezone.now())
        return DispatchOutcome("refused", str(exc))
    except (BackendError, TransportError, NoClusterAccount) as exc:
        with transaction.atomic():
            job = locked_job(job_id)
            if job.state == JobState.SUBMITTING:
                # Release the lease so the retry (or the recovery sweep) may take over at once.
                job.dispatch_lease_until = None
                job.state_reason = f"could not reach the scheduler yet, will retry: {exc}"
                job.save(update_fields=["dispatch_lease_until", "state_reason", "updated_at"])
        return DispatchOutcome("retry", str(exc))

    with transaction.atomic():
        job = locked_job(job_id)
        if job.state != JobState.SUBMITTING:
            log.error("job %s left SUBMITTING while being submitted (now %s, id %s)", job_id, job.state, scheduler_id)
            return DispatchOutcome("skipped", f"job is {job.state}")
        transition(
            job,
            JobState.PENDING,
            reason=f"scheduler id {scheduler_id}" + (" (found after a lost reply)" if existing else ""),
            scheduler_id=scheduler_id,
            submitted_at=timezone.now(),
            dispatch_lease_until=None,
            last_seen_at=timezone.now(),
        )
        cancel_wanted = job.cancel_requested_at is not None
    if cancel_wanted:
        _enqueue_cancel(job_id)
    return DispatchOutcome("found" if existing else "submitted", scheduler_id)


def _take_dispatch_lease(job: Job, now) -> DispatchOutcome | None:
    """Move a locked job to SUBMITTING under a lease, or say why this attempt must not submit it."""
    if job.state == JobState.QUEUED:
        transition(job, JobState.SUBMITTING, reason="handing to the scheduler", dispatch_lease_until=now + _lease(),
                   dispatch_attempts=job.dispatch_attempts + 1)
    elif job.state == JobState.SUBMITTING:
        if job.dispatch_lease_until and job.dispatch_lease_until > now:
            return DispatchOutcome("busy", "another attempt holds this job")
        # The previous attempt died (worker killed, broker restarted): take over, but look before submitting.
        job.dispatch_lease_until = now + _lease()
        job.dispatch_attempts += 1
        job.save(update_fields=["dispatch_lease_until", "dispatch_attempts", "updated_at"])
    else:
        return DispatchOutcome("skipped", f"job is {job.state}")
    return None


def dispatch_array(group_id: int) -> DispatchOutcome:
    """Hand a sweep's waiting elements to the scheduler as one array, exactly once, however often this runs.

    The elements move together: all SUBMITTING under one lease, then all PENDING with their element ids. One
    cancelled before the submit is still an index of the array (the script numbers them all), so it is
    deleted on the scheduler right after.
    """
    now = timezone.now()
    with transaction.atomic():
        jobs = list(Job.objects.select_for_update().filter(group_id=group_id).order_by("pk"))
        waiting = [j for j in jobs if j.state in {JobState.QUEUED, JobState.SUBMITTING}]
        if not waiting:
            return DispatchOutcome("skipped", "no element of the array is waiting")
        if any(j.state == JobState.SUBMITTING and j.dispatch_lease_until and j.dispatch_lease_until > now
               for j in waiting):
            return DispatchOutcome("busy", "another attempt holds this array")
        attempts = max(j.dispatch_attempts for j in waiting) + 1
        lease = {"dispatch_lease_until": now + _lease(), "dispatch_attempts": attempts}
        queued = [j for j in waiting if j.state == JobState.QUEUED]
        transition_many(queued, JobState.SUBMITTING, reason="handing the array to the scheduler", **lease)
        # Those already SUBMITTING were left by an attempt that died: take over, but look before submitting.
        Job.objects.filter(pk__in=[j.pk for j in waiting if j not in queued]).update(**lease)
    group = JobGroup.objects.get(pk=group_id)
    jobs.sort(key=lambda j: j.array_index)
    first = jobs[0]
    spec = build_array_spec(jobs, group.scheduler_name, group.remote_dir)
    try:
        backend = backend_for(first.cluster, account_for(first.cluster, first.user, first.project))
        existing = backend.find(spec) if attempts > 1 else None
        array_id = existing or backend.submit(spec, first.rendered_script)
    except SubmitRefused as exc:
        with transaction.atomic():
            for job in _locked_submitting(group_id):
                transition(job, JobState.FAILED, reason=f"the scheduler refused the array: {exc}", ended_at=timezone.now())
        return DispatchOutcome("refused", str(exc))
    except (BackendError, TransportError, NoClusterAccount) as exc:
        with transaction.atomic():
            for job in _locked_submitting(group_id):
                job.dispatch_lease_until = None
                job.state_reason = f"could not reach the scheduler yet, will retry: {exc}"
                job.save(update_fields=["dispatch_lease_until", "state_reason", "updated_at"])
        return DispatchOutcome("retry", str(exc))

    found = " (found after a lost reply)" if existing else ""
    with transaction.atomic():
        JobGroup.objects.filter(pk=group_id).update(scheduler_id=array_id)
        submitted = _locked_submitting(group_id)
        for job in submitted:
            job.scheduler_id = backend.element_id(array_id, job.array_index)
        now = timezone.now()
        transition_many(submitted, JobState.PENDING, also=["scheduler_id"],
                        reason=f"an element of scheduler array {array_id}{found}",
                        submitted_at=now, dispatch_lease_until=None, last_seen_at=now)
        cancel_wanted = [job.pk for job in submitted if job.cancel_requested_at is not None]
        dropped = list(Job.objects.filter(group_id=group_id, state=JobState.CANCELLED, scheduler_id=""))
    for job_id in cancel_wanted:
        _enqueue_cancel(job_id)
    for job in dropped:
        _delete_dropped_element(backend, job, array_id)
    return DispatchOutcome("found" if existing else "submitted", array_id)


def _locked_submitting(group_id: int) -> list[Job]:
    return list(Job.objects.select_for_update().filter(group_id=group_id, state=JobState.SUBMITTING).order_by("pk"))


def _delete_dropped_element(backend, job: Job, array_id: str) -> None:
    """An element cancelled before the array was submitted must not run (nor cost) anyway."""
    element = backend.element_id(array_id, job.array_index)
    try:
        backend.cancel(element)
    except (BackendError, TransportError) as exc:
        log.warning("could not delete element %s of cancelled job %s: %s", element, job.pk, exc)
        note = f"cancelled before submission, but deleting its element {element} of the array failed: {exc}"
    else:
        note = f"deleted its element {element} of the array, cancelled before submission"
    JobEvent.objects.create(job=job, from_state=job.state, to_state=job.state, reason=note[:2000])


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
        _enqueue_dispatch(job_id)
    return ids


# ------------------------------------------------------------------------------------------------- cancel


class CancelError(Exception):
    pass


def request_cancel(job: Job, user) -> Job:
    """Record a cancel. A job still in the portal's queue ends at once; others are cancelled on the scheduler."""
    if not (job.user_id == user.pk and access.can(user, job.project, "submit")) and not access.can(
        user, job.project, "manage_jobs"
    ):
        from django.core.exceptions import PermissionDenied

        raise PermissionDenied("only the job's owner or a project admin can cancel it")
    with transaction.atomic():
        job = locked_job(job.pk)
        if job.state in FINAL_STATES:
            raise CancelError(f"the job already ended ({job.get_state_display()})")
        record("job.cancel", actor=user, project=job.project, target=job, state=job.state)
        if job.state == JobState.QUEUED:
            transition(job, JobState.CANCELLED, reason=f"cancelled by {user} before submission", actor=user,
                        cancel_requested_at=timezone.now(), ended_at=timezone.now())
            return job
        if job.cancel_requested_at is None:
            job.cancel_requested_at = timezone.now()
            job.save(update_fields=["cancel_requested_at", "updated_at"])
            JobEvent.objects.create(job=job, from_state=job.state, to_state=job.state, reason=f"cancel requested by {user}", actor=user)
        if job.scheduler_id:
            transaction.on_commit(lambda: _enqueue_cancel(job.pk))
    return job


def request_cancel_sweep(group: JobGroup, user) -> list[Job]:
    """Cancel every job of a sweep that has not ended, each as `request_cancel` does (an array's elements are
    cancelled one by one, so each keeps its own record). Returns the jobs whose cancel was recorded."""
    cancelled = []
    for job in Job.objects.filter(group=group).exclude(state__in=FINAL_STATES).order_by("pk"):
        try:
            cancelled.append(request_cancel(job, user))
        except CancelError:
            continue  # it ended meanwhile
    return cancelled


def _enqueue_cancel(job_id: int) -> None:
    from portal.jobs.tasks import cancel_job_task

    cancel_job_task.delay(job_id)


def cancel_on_scheduler(job_id: int) -> str:
    job = Job.objects.select_related("cluster", "project", "user").get(pk=job_id)
    if job.state in FINAL_STATES or not job.scheduler_id:
        return "nothing to do"
    account = account_for(job.cluster, job.user, job.project)
    backend = backend_for(job.cluster, account)
    backend.cancel(job.scheduler_id)
    return "cancel sent"


def cancel_for_budget(job_id: int, reason: str) -> None:
    """Strict budget exhausted: cancel like a person would, with the reason on record."""
    with transaction.atomic():
        job = locked_job(job_id)
        if job.state in FINAL_STATES or job.cancel_requested_at:
            return
        if job.state == JobState.QUEUED:
            transition(job, JobState.CANCELLED, reason=reason, ended_at=timezone.now(), cancel_requested_at=timezone.now())
            return
        job.cancel_requested_at = timezone.now()
        job.save(update_fields=["cancel_requested_at", "updated_at"])
        JobEvent.objects.create(job=job, from_state=job.state, to_state=job.state, reason=reason)
        record("job.cancel_budget", project=job.project, target=job, reason=reason)
        if job.scheduler_id:
            transaction.on_commit(lambda: _enqueue_cancel(job.pk))


