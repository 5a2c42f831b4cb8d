"""What a person may pick: the projects they can submit in, the hardware and software those projects have."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

from django.db.models import Q, QuerySet

from backends.base import Reach
from backends.local import missing_on_host
from portal.budgets import actions as budgets
from portal.budgets.models import Budget
from portal.budgets.queries import budget_of
from portal.catalog import job_templates
from portal.catalog.models import HardwareType, Preset, Software
from portal.clusters.connect import NoClusterAccount, accounts_for, backend_settings, reach_of
from portal.clusters.models import Allocation, ClusterHealth
from portal.projects import access
from portal.projects.models import Project


def submittable_projects(user) -> QuerySet[Project]:
    return access.projects_where(user, "submit")


def hardware_by_project(projects) -> dict[int, set[int]]:
    """Per project id, the ids of the hardware it may use: enabled hardware on enabled clusters it is allocated,
    honouring each allocation's restriction and unused list, without hardware whose queue the health check found
    missing or disabled (a torn-down cloud queue). Five statements however many projects (the job form asks this
    for every project a person is in)."""
    # Plain rows, not models: the job form and every preview ask this, and building model instances for the
    # prefetch cost more than the statements themselves.
    allocations = list(Allocation.objects.filter(project__in=projects, cluster__enabled=True, in_use=True)
                       .values_list("pk", "project_id", "cluster_id"))
    restricted: dict[int, set[int]] = {}
    for allocation_id, hw_id in Allocation.hardware.through.objects.filter(
            allocation_id__in=[pk for pk, _, _ in allocations]).values_list("allocation_id", "hardwaretype_id"):
        restricted.setdefault(allocation_id, set()).add(hw_id)
    unused: dict[int, set[int]] = {}
    for allocation_id, hw_id in Allocation.unused_hardware.through.objects.filter(
            allocation_id__in=[pk for pk, _, _ in allocations]).values_list("allocation_id", "hardwaretype_id"):
        unused.setdefault(allocation_id, set()).add(hw_id)
    clusters = {cluster_id for _, _, cluster_id in allocations}
    unavailable = dict(ClusterHealth.objects.filter(cluster_id__in=clusters).exclude(unavailable={})
                       .values_list("cluster_id", "unavailable"))
    on_cluster: dict[int, list[tuple[int, str]]] = {}
    for pk, cluster_id, slug in HardwareType.objects.filter(cluster_id__in=clusters, enabled=True).values_list(
            "pk", "cluster_id", "slug"):
        if slug not in (unavailable.get(cluster_id) or {}):
            on_cluster.setdefault(cluster_id, []).append((pk, slug))
    usable: dict[int, set[int]] = {}
    for allocation_id, project_id, cluster_id in allocations:
        only, skip = restricted.get(allocation_id), unused.get(allocation_id, set())
        usable.setdefault(project_id, set()).update(
            pk for pk, _ in on_cluster.get(cluster_id, ()) if (not only or pk in only) and pk not in skip)
    return usable


def hardware_for_projects(projects) -> QuerySet[HardwareType]:
    """Enabled hardware on clusters the projects are allocated, honouring per-allocation restrictions."""
    return hardware_of(hardware_by_project(projects))


def hardware_of(by_project: dict[int, set[int]]) -> QuerySet[HardwareType]:
    """The hardware in a hardware_by_project answer, whichever project may use it."""
    return HardwareType.objects.filter(pk__in=set().union(*by_project.values())).select_related("cluster")


def why_not_usable(hardware: HardwareType, project) -> str | None:
    """Why `project` may not pick `hardware` now (a revoked grant, a restriction, switched off), None if it may."""
    cluster = hardware.cluster
    allocation = Allocation.objects.filter(project=project, cluster=cluster).first()
    if allocation is None:
        return f"project {project.slug} no longer has access to {cluster.name}, where {hardware.name} is"
    if allocation.hardware.exists() and not allocation.hardware.filter(pk=hardware.pk).exists():
        return f"project {project.slug} may no longer use {hardware.name} on {cluster.name}"
    if not cluster.enabled:
        return f"{cluster.name} is switched off: {cluster.disabled_reason}" if cluster.disabled_reason else \
            f"{cluster.name} is switched off by the site admins"
    if not hardware.enabled:
        return f"{hardware.name} on {cluster.name} is switched off by the site admins"
    health = ClusterHealth.objects.filter(cluster=cluster).values_list("unavailable", flat=True).first() or {}
    if hardware.slug in health:
        return f"{hardware.name} on {cluster.name} cannot take jobs now: {health[hardware.slug]}"
    return None


def hardware_for_project(project) -> QuerySet[HardwareType]:
    return hardware_for_projects(Project.objects.filter(pk=project.pk))


def software_for_projects(projects) -> QuerySet[Software]:
    clusters = Allocation.objects.filter(project__in=projects, in_use=True).values_list("cluster_id", flat=True)
    return (
        Software.objects.filter(enabled=True, clusters__in=clusters)
        .filter(Q(projects__isnull=True) | Q(projects__in=projects))
        .distinct()
    )


def software_providing(needs, cluster, project) -> list[Software]:
    """The software `project` may load on `cluster` that provides everything in `needs` (a template's
    requires), in name order: what the job form picks for a template."""
    candidates = software_for_projects(Project.objects.filter(pk=project.pk)).filter(clusters=cluster)
    return [software for software in candidates if software.provides_all(needs)]


@dataclass
class PresetChoice:
    preset: Preset
    options: list[HardwareType]  # those the person can use first, then cheapest first
    missing: dict[int, str] = field(default_factory=dict)  # hardware id → what the person lacks to run there

    @property
    def best(self) -> HardwareType | None:
        return self.options[0] if self.options else None

    @property
    def best_is_cheapest(self) -> bool:
        """Whether the first choice is also the cheapest (it may not be when a cheaper place lacks an account)."""
        def amount(hw):
            price = getattr(hw, "price", None)
            return price.amount if price is not None else None
        first = amount(self.best) if self.options else None
        return first is not None and all(amount(hw) is None or first <= amount(hw) for hw in self.options)

    @property
    def choices(self) -> list[tuple[HardwareType, str]]:
        """(hardware, what is missing: "" where the person can run) for each option, in order."""
        return [(hw, self.missing.get(hw.pk, "")) for hw in self.options]


def missing_accounts(user, project, clusters) -> dict[int, str]:
    """Per cluster id: why `user` cannot run `project`'s jobs there yet (no linked account, no service account),
    or "" — what the presets and the comparison put last and say (issue 25)."""
    return {pk: str(found) if isinstance(found, NoClusterAccount) else ""
            for pk, found in accounts_for(clusters, user, project).items()}


def price_per_node_hour(hardware: HardwareType, budget: Budget | None) -> budgets.Money | None:
    """A node-hour of `hardware` in the unit of the project's budget (its own unit without a budget); None when
    no conversion between the two units is set."""
    if budget is None:
        return budgets.Money(hardware.rate, hardware.rate_unit)
    try:
        return budgets.Money(budgets.convert(Decimal(hardware.rate), hardware.rate_unit, budget.unit), budget.unit)
    except budgets.NoConversion:
        return None


def resolve_preset(preset: Preset, project, user=None) -> PresetChoice:
    """Hardware the project may use that matches the preset: where `user` (if given) can run first, then cheapest
    per node-hour first."""
    hardware = hardware_for_project(project).filter(gpus_per_node=preset.gpus_per_node, max_nodes__gte=preset.nodes)
    if preset.gpu_model:
        hardware = hardware.filter(gpu_model__iexact=preset.gpu_model)
    budget = budget_of(project)

    def price(hw: HardwareType) -> Decimal:
        # What the choice shows: the node-hour in the budget's unit, never the cluster's own beside it.
        hw.price = price_per_node_hour(hw, budget)
        hw.budget_unit = budget.unit if budget is not None else hw.rate_unit
        return hw.price.amount if hw.price is not None else Decimal("Infinity")

    hardware = list(hardware.select_related("cluster"))
    missing = {}
    if user is not None:
        lacking = missing_accounts(user, project, [hw.cluster for hw in hardware])
        missing = {hw.pk: lacking[hw.cluster_id] for hw in hardware if lacking[hw.cluster_id]}
    return PresetChoice(preset, sorted(hardware, key=lambda hw: (hw.pk in missing, price(hw), hw.slug)), missing)


def picker_context(user, form) -> dict:
    project = form.initial.get("project") or (form.cleaned_data.get("project") if form.is_bound and hasattr(form, "cleaned_data") else None)
    if project is None:
        project = form.fields["project"].queryset.first()
    return {"presets": presets_for(project, user), "picker_project": project}


def host_template_limits(hardware) -> list[str]:
    """Why the templates cannot run on a cluster of `hardware` that is the portal host itself (its Python has no
    torch): said under the template picker, before anyone picks one (issue 25)."""
    limits = []
    needs = sorted({name for t in job_templates.TEMPLATES.values() for name in t.requires})
    launchers = sorted({t.launcher for t in job_templates.TEMPLATES.values()})
    for cluster in {hw.cluster for hw in hardware.select_related("cluster")}:
        if reach_of(cluster) is not Reach.LOCAL:
            continue
        missing = [m for launcher in launchers for m in missing_on_host((), launcher, backend_settings(cluster))]
        missing += missing_on_host(needs, "", backend_settings(cluster))
        if missing:
            limits.append(f"The templates cannot run on {cluster.name}: it has no {' or '.join(missing)} "
                          f"({job_templates.HOST_TORCH_HINT}).")
    return limits


def presets_for(project, user=None) -> list[PresetChoice]:
    return [resolve_preset(p, project, user) for p in Preset.objects.all()] if project else []


@dataclass
class BudgetAfter:
    summary: budgets.BudgetSummary
    after: Decimal
    fits: bool


def budget_after(project, estimate) -> BudgetAfter | None:
    budget = budget_of(project)
    if budget is None or estimate is None:
        return None
    summary = budgets.summary(budget)
    after = summary.available - estimate.amount
    return BudgetAfter(summary=summary, after=after, fits=after >= 0 or not budget.strict)

