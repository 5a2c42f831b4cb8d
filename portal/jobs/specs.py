"""From a Job row to the plain JobSpec a backend understands, and the script it renders."""

from __future__ import annotations

import json
import uuid as uuid_mod
from dataclasses import replace

from django.conf import settings

from backends.base import ArrayElement, JobSpec, Launcher, Resources
from portal.catalog import job_templates
from portal.clusters.connect import job_dir
from portal.clusters.models import Allocation, Cluster
from portal.jobs import notebooks


def scheduler_name(job_uuid: uuid_mod.UUID, name: str) -> str:
    # Unique across portal instances and database resets, so a retry can look the job up by name.
    return f"kh-{job_uuid.hex[:10]}-{name}"[:63]


def group_for(project, cluster: Cluster) -> str:
    allocation = Allocation.objects.filter(project=project, cluster=cluster).first()
    return allocation.group if allocation else ""


def parameter_env(job) -> dict[str, str]:
    """A script job's parameters (a sweep's point) as environment variables; a notebook gets parameters.json."""
    if job.kind != job.Kind.SCRIPT:
        return {}
    return {key: value if isinstance(value, str) else json.dumps(value) for key, value in (job.parameters or {}).items()}


def job_env(job) -> dict[str, str]:
    """The job's environment: what the user set, plus its parameters by name."""
    return {**(job.env or {}), **parameter_env(job)}


def _parameter_files(job) -> dict[str, bytes]:
    if job.kind == job.Kind.NOTEBOOK and job.notebook is not None:
        return {"parameters.json": json.dumps(job.parameters or {}).encode()}
    return {}


def attached_datasets(job) -> list:
    """The datasets a job is given: those a submit being prepared attached (not saved yet), else the saved ones."""
    attached = getattr(job, "attached_datasets", None)
    if attached is None:
        # A job locked for dispatch already says whether it has any (locks.job's `has_datasets`).
        has_any = job.pk is not None and getattr(job, "has_datasets", True)
        attached = list(job.datasets.select_related("project", "stored_file", "cluster")) if has_any else []
        job.attached_datasets = attached  # read once per job object: the spec and the staging both ask
    return sorted(attached, key=lambda d: d.name)


def build_spec(job, *, group: str | None = None) -> JobSpec:
    """The JobSpec of a Job (saved or not: the form's preview renders an unsaved one). `group`: the scheduler
    group, when the caller already looked it up (a sweep's points share it)."""
    hw = job.hardware
    resources = Resources(
        nodes=job.nodes,
        gpus_per_node=hw.gpus_per_node if hw else 0,
        gpu_type=hw.gpu_model if hw else "",
        cpus_per_node=hw.cpus_per_node if hw else 1,
        memory_gb=hw.memory_gb if hw else None,
        mapping=dict(hw.scheduler_mapping) if hw else {},
    )
    software = job.software
    name = job.scheduler_name or scheduler_name(job.uuid, job.name)
    payload, files = job.script, {}
    template = job_templates.get(job.template)
    if template is not None:
        files.update(template.file_contents())
    if job.kind == job.Kind.NOTEBOOK and job.notebook is not None:
        # The files sent beside it (a utils.py, a small CSV) land next to it, in papermill's working directory.
        files.update(notebooks.side_files(job.notebook))
        files["notebook.ipynb"] = json.dumps(notebooks.without_side_files(job.notebook)).encode()
    files |= _parameter_files(job)
    if job.kind == job.Kind.SESSION and job.pk is not None:
        # An interactive session's launcher and the hub's variables for its server (portal/sessions/models.py).
        session = getattr(job, "session", None)
        if session is not None:
            files |= session.launch_files()
    return JobSpec(
        name=name,
        payload=payload,
        walltime_seconds=job.walltime_seconds,
        resources=resources,
        workdir=job.remote_dir or job_dir(job.cluster, name),
        group=group if group is not None else group_for(job.project, job.cluster),
        modules=tuple(software.modules) if software and software.kind == "modules" else (),
        container=software.image if software and software.kind == "container" else "",
        setup=software.setup if software else "",
        env=job_env(job),
        launcher=Launcher(job.launcher),
        procs_per_node=job.procs_per_node,
        cwd=job.working_directory,
        files=files,
        labels={"project": job.project.slug, "job": job.uuid.hex, "user": job.user.username},
        datasets=tuple(sorted(d.name for d in attached_datasets(job))),
        **sampler_of(job.cluster),
    )


def sampler_of(cluster: Cluster) -> dict:
    """The sampler every job of `cluster` runs (docs/guide/idle-gpus.md): the site's interval, which a cluster's
    options may change ({"sample_seconds": 60}, 0 for none), and the nvidia-smi it asks ({"nvidia_smi": path}:
    a site's own path, or the test cluster's stand-in)."""
    options = cluster.options or {}
    seconds = options.get("sample_seconds", settings.KAKEHASHI_SAMPLE_SECONDS)
    return {"sample_seconds": seconds if isinstance(seconds, int) and not isinstance(seconds, bool) else 0,
            "nvidia_smi": str(options.get("nvidia_smi") or "nvidia-smi")}


def build_array_spec(jobs, name: str, workdir: str) -> JobSpec:
    """One JobSpec for the elements of a sweep submitted as a scheduler array (`jobs` ordered by array index).

    The elements differ only in their parameters, so everything else comes from the first of them.
    """
    first = jobs[0]
    elements = tuple(ArrayElement(job.array_index, env=parameter_env(job), files=_parameter_files(job)) for job in jobs)
    spec = build_spec(first)
    return replace(spec, name=name, workdir=workdir, env=dict(first.env or {}), array=elements,
                   labels={**spec.labels, "job": name})
