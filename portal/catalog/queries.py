"""What a person may pick: the projects they can submit in, the hardware and software those projects have."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from django.db.models import Q, QuerySet

from portal.budgets import actions as budgets
from portal.budgets.models import Budget
from portal.budgets.queries import budget_of
from portal.catalog.models import HardwareType, Preset, Software
from portal.clusters.models import Allocation
from portal.projects import access
from portal.projects.models import Project


def submittable_projects(user) -> QuerySet[Project]:
    return access.projects_where(user, "submit")


def hardware_for_projects(projects) -> QuerySet[HardwareType]:
    """Enabled hardware on clusters the projects are allocated, honouring per-allocation restrictions."""
    allocations = Allocation.objects.filter(project__in=projects, cluster__enabled=True, in_use=True).prefetch_related(
        "hardware", "unused_hardware")
    condition = Q(pk__in=[])
    for allocation in allocations:
        restricted = [hw.pk for hw in allocation.hardware.all()]
        unused = [hw.pk for hw in allocation.unused_hardware.all()]
        here = Q(cluster_id=allocation.cluster_id, pk__in=restricted) if restricted else Q(cluster_id=allocation.cluster_id)
        condition |= here & ~Q(pk__in=unused) if unused else here
    return HardwareType.objects.filter(condition, enabled=True).select_related("cluster")


def why_not_usable(hardware: HardwareType, project) -> str | None:
    """Why `project` may not pick `hardware` now (a revoked grant, a restriction, switched off), None if it may."""
    cluster = hardware.cluster
    allocation = Allocation.objects.filter(project=project, cluster=cluster).first()
    if allocation is None:
        return f"project {project.slug} no longer has access to {cluster.name}, where {hardware.name} is"
    if allocation.hardware.exists() and not allocation.hardware.filter(pk=hardware.pk).exists():
        return f"project {project.slug} may no longer use {hardware.name} on {cluster.name}"
    if not cluster.enabled:
        return f"{cluster.name} is switched off by the site admins"
    if not hardware.enabled:
        return f"{hardware.name} on {cluster.name} is switched off by the site admins"
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
    options: list[HardwareType]  # cheapest first

    @property
    def best(self) -> HardwareType | None:
        return self.options[0] if self.options else None


def price_per_node_hour(hardware: HardwareType, budget: Budget | None) -> budgets.Money | None:
    """A node-hour of `hardware` in the unit of the project's budget (its own unit without a budget); None when
    no conversion between the two units is set."""
    if budget is None:
        return budgets.Money(hardware.rate, hardware.rate_unit)
    try:
        return budgets.Money(budgets.convert(Decimal(hardware.rate), hardware.rate_unit, budget.unit), budget.unit)
    except budgets.NoConversion:
        return None


def resolve_preset(preset: Preset, project) -> PresetChoice:
    """Hardware the project may use that matches the preset, cheapest per node-hour first."""
    hardware = hardware_for_project(project).filter(gpus_per_node=preset.gpus_per_node, max_nodes__gte=preset.nodes)
    if preset.gpu_model:
        hardware = hardware.filter(gpu_model__iexact=preset.gpu_model)
    budget = budget_of(project)

    def price(hw: HardwareType) -> Decimal:
        money = price_per_node_hour(hw, budget)
        return money.amount if money is not None else Decimal("Infinity")

    return PresetChoice(preset, sorted(hardware, key=lambda hw: (price(hw), hw.slug)))


def picker_context(user, form) -> dict:
    project = form.initial.get("project") or (form.cleaned_data.get("project") if form.is_bound and hasattr(form, "cleaned_data") else None)
    if project is None:
        project = form.fields["project"].queryset.first()
    return {"presets": presets_for(project), "picker_project": project}


def presets_for(project) -> list[PresetChoice]:
    return [resolve_preset(p, project) for p in Preset.objects.all()] if project else []


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

