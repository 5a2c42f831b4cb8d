"""What an API caller can see, and slugs resolved to objects visible to them (404 for everything else).

Objects of projects the caller cannot see are reported as "not found" — never "forbidden" — so the API does
not reveal what exists in other projects.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import F, OuterRef, Q, QuerySet, Subquery
from django.urls import reverse

from portal.api.errors import NotFound
from portal.api.pagination import page_of
from portal.budgets.actions import Money
from portal.catalog import queries as catalog
from portal.catalog.models import HardwareType, Software
from portal.clusters.models import Allocation, Cluster
from portal.clusters.queries import visible_clusters  # noqa: F401  (the API's views ask it here)
from portal.compiled import CompiledRead
from portal.jobs.actions.sweeps import SweepSubmission
from portal.jobs.models import Job, JobGroup
from portal.jobs.queries import job_for, sweep_for, sweep_totals
from portal.projects import access
from portal.projects.models import Membership, Project
from portal.storage.models import StoredFile
from portal.storage.queries import visible_files


def projects_with_role(user) -> QuerySet[Project]:
    """Visible projects, each with `my_role` (site staff see every project, as owners, like access.role_of)."""
    role = Membership.objects.filter(project=OuterRef("pk"), user=user).values("role")[:1]
    return access.visible_projects(user).annotate(my_role=Subquery(role)).order_by("slug")


def project_or_404(user, slug: str, *, field: str | None = None) -> Project:
    # A NUL byte cannot reach PostgreSQL (it refuses it in text: a 500): no slug has one, so no such project.
    project = access.with_membership(user, slug) if isinstance(slug, str) and "\x00" not in slug else None
    if project is None:
        raise NotFound(f"project {slug!r} not found (or you are not a member of it)", field=field)
    return project



def usable_hardware(user, project: Project | None = None) -> QuerySet[HardwareType]:
    """Enabled hardware the caller's projects (or one of them) may use: what the hardware picker offers."""
    projects = access.visible_projects(user) if project is None else Project.objects.filter(pk=project.pk)
    return catalog.hardware_for_projects(projects).order_by("cluster__slug", "gpus_per_node", "slug")


def usable_software(user, project: Project | None = None) -> QuerySet[Software]:
    projects = access.visible_projects(user) if project is None else Project.objects.filter(pk=project.pk)
    return catalog.software_for_projects(projects).prefetch_related("clusters").order_by("slug")


# Every submit naming its hardware reads one of these: compiled once per process (docs/decisions/0054). The same
# statements as HardwareType.objects.filter(slug=slug, cluster__in=visible_clusters(user)).select_related("cluster").
_STAFF_HARDWARE = CompiledRead(lambda slug: HardwareType.objects.filter(slug=slug).select_related("cluster"), slug=str)
_HARDWARE = CompiledRead(lambda slug, user: HardwareType.objects.filter(slug=slug, cluster__in=Cluster.objects.filter(
    pk__in=Allocation.objects.filter(project__in=Project.objects.filter(memberships__user_id=user)).values("cluster_id")))
    .select_related("cluster"), slug=str, user=int)


def hardware_or_404(user, slug: str) -> HardwareType:
    """Hardware on a cluster of the caller's projects, enabled or not: submit_job explains why it cannot be used."""
    if "\x00" in slug:  # PostgreSQL refuses a NUL in text (a 500): no slug has one
        hardware = None
    elif getattr(user, "is_staff", False):
        hardware = _STAFF_HARDWARE.first(slug=slug)
    else:
        hardware = _HARDWARE.first(slug=slug, user=user.pk)
    if hardware is None:
        raise NotFound(f"hardware {slug!r} not found on the clusters of your projects (see GET /api/v1/hardware/)",
                       field="hardware")
    return hardware


def software_or_404(user, slug: str) -> Software:
    projects = access.visible_projects(user)
    software = (
        Software.objects.filter(slug=slug, clusters__in=visible_clusters(user))
        .filter(Q(projects__isnull=True) | Q(projects__in=projects))
        .distinct()
        .first()
    )
    if software is None:
        raise NotFound(f"software {slug!r} not found for your projects (see GET /api/v1/software/)", field="software")
    return software


def job_or_404(user, pk: int) -> Job:
    job = job_for(user, pk)
    if job is None:
        raise NotFound(f"job {pk} not found (or not in a project you can see)")
    return job


def sweep_or_404(user, pk: int) -> JobGroup:
    """A sweep of a project the user can see."""
    group = sweep_for(user, pk)
    if group is None:
        raise NotFound(f"sweep {pk} not found (or not in a project you can see)")
    return group


SWEEP_PAGE = 100  # a sweep's jobs an answer carries unless `limit` says otherwise: all of any sweep one submit makes


@dataclass
class SweepPage:
    """A sweep as the API answers it: the whole sweep's figures, and a page of its jobs in array order."""

    group: JobGroup  # unsaved for a dry run
    jobs: list[Job]  # this page's
    jobs_count: int  # all of them
    jobs_next: str | None
    jobs_previous: str | None
    script: str  # the array's job script (array mode), else the first job's
    estimate: Money | None  # what all of its jobs reserve
    created: bool  # False: replayed by its Idempotency-Key, a dry run, or read later

    @property
    def array(self) -> bool:
        return self.group.array

    @classmethod
    def drafted(cls, sweep: SweepSubmission) -> SweepPage:
        """A dry run's answer: every point it would submit (nothing recorded, so nothing to page on; at most
        MAX_SWEEP_JOBS)."""
        return cls(sweep.group, sweep.jobs, len(sweep.jobs), None, None, sweep.script, sweep.estimate, created=False)


def sweep_page(request, group: JobGroup, *, created: bool = False) -> SweepPage:
    """A recorded sweep with one page of its jobs (`limit`, `offset`): as many queries for 1,000 points as for 5."""
    jobs = group.jobs.all()
    totals = sweep_totals(jobs)
    page = page_of(request, jobs.select_related("project", "user", "cluster", "hardware", "software")
                   .prefetch_related("artifacts", "datasets")
                   .annotate(gpu_state=F("samples__state"), gpu_summary=F("samples__summary"))
                   .order_by("array_index", "pk"),
                   path=reverse("api-sweep-detail", args=[group.pk]), default_limit=SWEEP_PAGE)
    # Whichever page this is, the sweep's script is its first job's (an array element's is the array's).
    first = jobs.order_by("array_index", "pk").values_list("own_script", flat=True).first()
    return SweepPage(group, page.items, page.count, page.next, page.previous, script=first or group.rendered_script,
                     estimate=Money(totals.estimate, totals.unit) if totals.unit else None, created=created)


def file_or_404(user, project: Project, pk: int) -> StoredFile:
    stored = visible_files(user).filter(project=project, pk=pk).first()
    if stored is None:
        raise NotFound(f"file {pk} not found in project {project.slug}")
    return stored
