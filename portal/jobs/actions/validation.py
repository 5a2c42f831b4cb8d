"""What a job request must satisfy before anything is recorded: the grant, the size, the payload, an edit.

Every refusal is a SubmitError whose message tells the person what to change (and which field); the pages and
the API show it as it is.
"""

from __future__ import annotations

import json
import re
import shlex
import uuid as uuid_mod
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db.models import Exists, OuterRef, Subquery

from backends.base import Backend, InvalidJobSpec, JobSpec, Reach
from backends.local import job_python, missing_on_host
from backends.safety import bash_syntax_error, check_env, check_job_name, check_path
from backends.script import hms
from portal.budgets.actions import BUDGET_FIGURES
from portal.budgets.models import Budget
from portal.catalog import job_templates
from portal.catalog.models import HardwareType, Software
from portal.catalog.queries import software_providing
from portal.clusters.connect import backend_settings, is_cloud, reach_of
from portal.clusters.models import Allocation, Cluster, ClusterHealth
from portal.compiled import CompiledRead
from portal.jobs import notebooks
from portal.jobs.models import Job
from portal.projects.models import Project

# A job's walltime as the pages and the API show it, and as the schedulers take it.
format_walltime = hms


_HMS = re.compile(r"^(?:(\d+)-)?(\d{1,4}):(\d{1,2})(?::(\d{1,2}))?$")
_UNITS = re.compile(r"(\d+(?:\.\d+)?)\s*([dhms])", re.I)
_UNIT_SECONDS = {"d": 86400, "h": 3600, "m": 60, "s": 1}


def parse_walltime(text: str | int) -> int:
    """Seconds from "HH:MM:SS", "HH:MM", "D-HH:MM:SS", "2h", "90m", "1d12h" or a number of seconds."""
    if isinstance(text, int) and not isinstance(text, bool):
        seconds = text
    else:
        raw = str(text).strip()
        match = _HMS.match(raw)
        if match:
            days, hours, minutes, secs = match.groups()
            if int(minutes) >= 60 or (secs and int(secs) >= 60):
                raise ValidationError(f"walltime {raw!r}: minutes and seconds must be below 60")
            seconds = int(days or 0) * 86400 + int(hours) * 3600 + int(minutes) * 60 + int(secs or 0)
        elif raw.isdigit():
            seconds = int(raw)
        elif raw and _UNITS.sub("", raw).strip() == "" and _UNITS.search(raw):
            seconds = int(sum(float(n) * _UNIT_SECONDS[u.lower()] for n, u in _UNITS.findall(raw)))
        else:
            raise ValidationError(
                f"walltime {raw!r} is not a duration: write HH:MM:SS (e.g. 01:30:00) or 90m, 2h, 1d"
            )
    if seconds <= 0:
        raise ValidationError("walltime must be longer than zero")
    return seconds


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
    datasets: list[str] = field(default_factory=list)  # names of the project's datasets: $KAKEHASHI_DATA/<name>

    @classmethod
    def from_data(cls, data: Mapping[str, Any], **resolved: Any) -> JobRequest:
        """The request validated submit data describes — the job form's `cleaned_data` or the API serializer's
        `validated_data`: its plain fields copied by name (a field left empty takes its default), and the objects
        each caller looked up its own way (`project=`, `hardware=`, `software=`; the page answers 404, the API
        NotFound) given as keywords. One builder, so a field added here reaches the page and the API alike."""
        names = {f.name for f in fields(cls)}
        plain = {k: v for k, v in data.items() if k in names and k not in resolved and v not in (None, "")}
        return cls(**plain, **resolved)


def granted_cluster_and_hardware(req: JobRequest) -> tuple[Cluster, HardwareType | None]:
    """The cluster and hardware, if the project is granted them (and the software, if any, is there)."""
    cluster, hw, _ = granted_allocation(req)
    return cluster, hw


def _grant(project: int, cluster: int, hardware: int | None):
    chosen = Allocation.hardware.through.objects.filter(allocation=OuterRef("pk"))
    unused = Allocation.unused_hardware.through.objects.filter(allocation=OuterRef("pk"))
    # The project budget's unit (None: it has none), in which the estimate is priced, and its balance as it is
    # now, so that a submit a strict budget cannot cover is refused before any job is recorded (a refused submit
    # consumes no job number; the reservation under the row lock stays the one that counts).
    budget = Budget.objects.filter(project_id=OuterRef("project_id"))
    figures = {f"budget_{name}": Subquery(budget.values(name)[:1]) for name in BUDGET_FIGURES}
    return (Allocation.objects.filter(project_id=project, cluster_id=cluster)
            .annotate(restricted=Exists(chosen), allows=Exists(chosen.filter(hardwaretype=hardware)),
                      switched_off=Exists(unused.filter(hardwaretype=hardware)), **figures))


# Compiling this read was a quarter of a submit request's CPU (docs/decisions/0054): compiled once per process.
_GRANT = CompiledRead(_grant, project=int, cluster=int, hardware=int)


def granted_allocation(req: JobRequest) -> tuple[Cluster, HardwareType | None, Allocation]:
    """`granted_cluster_and_hardware` with the allocation that grants them (whose group the script is charged to)."""
    cluster = req.hardware.cluster if req.hardware else req.cluster
    if cluster is None:
        raise SubmitError("choose the hardware to run on", field="hardware")
    if not cluster.enabled:
        why = f": {cluster.disabled_reason}" if cluster.disabled_reason else " by the site admins"
        raise SubmitError(f"{cluster.name} is switched off{why}", field="hardware")
    # One query answers "is there a grant", "may it use this hardware" and "did the project switch it off"
    # (submit's statement budget).
    allocation = _GRANT.first(project=req.project.pk, cluster=cluster.pk, hardware=req.hardware.pk if req.hardware else None)
    if allocation is None:
        raise SubmitError(f"project {req.project.slug} has no allocation on {cluster.name}", field="hardware")
    if not allocation.in_use:
        raise SubmitError(f"project {req.project.slug} does not use {cluster.name} (its owners chose so on the "
                          "project's Clusters page)", field="hardware")
    hw = req.hardware
    # Only the portal host itself has nothing to choose between (the `make run` demo).
    if hw is None and reach_of(cluster) is not Reach.LOCAL:
        raise SubmitError(f"choose a hardware type of {cluster.name}", field="hardware")
    if hw is not None:
        if not hw.enabled:
            raise SubmitError(f"{hw.name} is not available at the moment", field="hardware")
        if allocation.restricted and not allocation.allows:
            raise SubmitError(f"project {req.project.slug} may not use {hw.name}", field="hardware")
        if allocation.switched_off:
            raise SubmitError(f"project {req.project.slug} does not use {hw.name} (its owners chose so)", field="hardware")
        if is_cloud(cluster):  # its queue may have been deleted behind the portal's back
            gone = (ClusterHealth.objects.filter(cluster=cluster).values_list("unavailable", flat=True).first() or {})
            if hw.slug in gone:
                raise SubmitError(f"{hw.name} on {cluster.name} cannot take jobs now: {gone[hw.slug]}", field="hardware")
    if req.software is not None:
        software_ok = req.software.enabled and req.software.clusters.filter(pk=cluster.pk).exists()
        restricted = req.software.projects.exists()
        if not software_ok or (restricted and not req.software.projects.filter(pk=req.project.pk).exists()):
            raise SubmitError(f"{req.software.name} is not available on {cluster.name} for this project", field="software")
    checked_template_software(req, cluster)
    checked_notebook_software(req, cluster)
    return cluster, hw, allocation


def checked_template_software(req: JobRequest, cluster: Cluster) -> None:
    """A template runs only with software that provides what it needs (torch for torchrun and train.py): without
    it the job would fail on the cluster with `torchrun: No such file or directory`. On the portal host (the local
    cluster of `make run`) the host itself is asked, so a job whose launcher is missing is refused before it
    runs, never charged and failed (issue 25)."""
    template = job_templates.get(req.template)
    if reach_of(cluster) is Reach.LOCAL:
        checked_on_host(req, cluster, template)
        return
    if template is None or not template.requires:
        return
    needs = ", ".join(template.requires)
    if req.software is not None:
        if not req.software.provides_all(template.requires):
            raise SubmitError(
                f"template {template.slug} needs {needs}, which {req.software.name} does not provide; "
                + _software_hint(template, cluster, req.project),
                field="software",
            )
        return
    raise SubmitError(
        f"template {template.slug} needs {needs}: choose Software that provides it; "
        + _software_hint(template, cluster, req.project),
        field="software",
    )


def checked_on_host(req: JobRequest, cluster: Cluster, template: job_templates.JobTemplate | None) -> None:
    """The launcher and the modules a job needs, as the Python that local jobs run with sees them."""
    launcher = req.launcher or (template.launcher if template else "")
    if req.notebook is not None:
        return  # a notebook job runs papermill, checked with the notebook itself
    missing = missing_on_host(template.requires if template else (), launcher, backend_settings(cluster))
    if not missing:
        return
    python = job_python(backend_settings(cluster))
    what = f"template {template.slug} needs" if template else f"launcher {launcher} needs"
    raise SubmitError(
        f"{what} {' and '.join(missing)}, which {cluster.name} does not have (its jobs run with {python}); "
        f"{job_templates.HOST_TORCH_HINT if 'torch' in missing or 'torchrun' in missing else 'install it there'}, "
        "or run it on a cluster whose software provides it",
        field="template" if template else "launcher",
    )


NOTEBOOK_NEEDS = ("papermill",)


def checked_notebook_software(req: JobRequest, cluster: Cluster) -> None:
    """A notebook runs with papermill and its kernel inside the chosen software. Without software, a cluster's
    default environment has neither (the job would end with `python: command not found`, exit 127): refuse, naming
    the software that would do. The portal host's own Python (the local cluster of `make run`) has papermill."""
    if not isinstance(req.notebook, dict) or req.software is not None or reach_of(cluster) is Reach.LOCAL:
        return
    try:
        notebooks.validate(req.notebook)
    except notebooks.NotebookError:
        return  # what is not a notebook is refused by the notebook's own check, saying that first
    kernel = notebooks.kernel_of(req.notebook)
    fitting = [s for s in software_providing(NOTEBOOK_NEEDS, cluster, req.project) if kernel in (s.kernels or [])]
    if fitting:
        raise SubmitError(f"a notebook runs with papermill and its kernel {kernel!r} inside software: choose one that "
                          f"provides them on {cluster.name}: {', '.join(s.name for s in fitting)}", field="software")
    raise SubmitError(f"a notebook runs with papermill and its kernel {kernel!r} inside software, and no software on "
                      f"{cluster.name} provides them for project {req.project.slug}; ask the site admins to add it "
                      "(Software → provides papermill, kernels)", field="software")


def _software_hint(template: job_templates.JobTemplate, cluster: Cluster, project: Project) -> str:
    fitting = software_providing(template.requires, cluster, project)
    if fitting:
        return f"on {cluster.name}: {', '.join(s.name for s in fitting)}"
    return (f"no software on {cluster.name} provides {', '.join(template.requires)} for project {project.slug}; "
            "ask the site admins to add it (Software → provides)")


def checked_size(req: JobRequest, cluster: Cluster, hw: HardwareType | None) -> int:
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


def checked_payload(req: JobRequest) -> tuple[str, str]:
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
        script = notebook_payload(req.notebook, req.parameters, req.software)
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


def notebook_payload(notebook: Any, parameters: Any, software: Software | None = None) -> str:
    """Check a notebook, its parameters and its kernel against the software; the payload that runs it headless
    with papermill. papermill and the kernel are the software's (the payload runs inside its container or after
    its modules load), so `python -m papermill` uses the environment's Python, never the portal's."""
    kernels = list(software.kernels or []) if software is not None else [notebooks.DEFAULT_KERNEL]
    try:
        kernel = notebooks.check(notebook, parameters, kernels, software=software.name if software else "plain shell",
                                 max_bytes=settings.KAKEHASHI_MAX_NOTEBOOK_BYTES)
        notebooks.side_files(notebook)
    except notebooks.NotebookError as exc:
        raise SubmitError(exc.message, field=exc.field) from None
    # papermill reads parameters.json (JSON is YAML) and writes the executed notebook next to the outputs.
    return (
        f'python -m papermill notebook.ipynb "$KAKEHASHI_JOB_DIR/{NOTEBOOK_OUTPUT}" -f parameters.json '
        f'-k {shlex.quote(kernel)} --cwd "$KAKEHASHI_JOB_DIR" --no-progress-bar --log-output\n'
    )


def checked_edit(edited: str | None, rendered: str, renderer: Backend) -> str:
    """Advanced mode: the body may change, the directives may not (they follow from the form and the budget).

    The script to submit: `rendered` when there is no edit (or it changes nothing), else the checked edit.
    """
    if edited is not None:
        # Browsers send textareas with CRLF line ends: normalise before anything reads the edit, or bash's
        # syntax check sees `$'\r'` on every line (and a here-document or `esac` never ends).
        edited = edited.replace("\r\n", "\n")
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
    wanted = sorted(renderer.directive_lines(rendered))
    got = sorted(renderer.directive_lines(edited))
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
    return edited


def rendered(renderer: Backend, spec: JobSpec, edited: str | None, *, point: str = "") -> tuple[str, str]:
    """(the script to submit, its submit command): rendered from `spec`, or the person's checked edit of it.
    `point` names a sweep's point in the message of a spec that cannot be rendered."""
    try:
        script = renderer.render(spec)
        command = shlex.join(renderer.submit_command(spec))
    except InvalidJobSpec as exc:
        raise SubmitError(f"sweep point {point}: {exc}" if point else str(exc), field="sweep" if point else None) from None
    return checked_edit(edited, script, renderer), command
