from __future__ import annotations

from decimal import Decimal

from django.db import models

from portal.projects.models import slug_validator


class HardwareType(models.Model):
    """A kind of node on a cluster, how to ask the scheduler for it, and what a node-hour costs."""

    cluster = models.ForeignKey("clusters.Cluster", on_delete=models.CASCADE, related_name="hardware")
    slug = models.SlugField(unique=True, max_length=50, validators=[slug_validator])
    name = models.CharField(max_length=200)
    gpu_model = models.CharField(max_length=32, blank=True, help_text="e.g. a100, h100; blank for CPU nodes")
    gpus_per_node = models.PositiveIntegerField(default=0)
    cpus_per_node = models.PositiveIntegerField(default=1)
    memory_gb = models.PositiveIntegerField(null=True, blank=True)
    max_nodes = models.PositiveIntegerField(default=1)
    max_walltime_hours = models.PositiveIntegerField(default=24)
    # How this maps to the scheduler, e.g. {"partition": "gpu", "gres": "gpu:a100:8"} (Slurm),
    # {"resource": "f_node"} (TSUBAME), {"resource": "rt_AF"} (ABCI), {"queue": "gpu"} (PBS).
    scheduler_mapping = models.JSONField(default=dict, blank=True)
    rate = models.DecimalField(max_digits=12, decimal_places=4, default=Decimal("0"), help_text="per node-hour")
    rate_unit = models.CharField(max_length=16, default="points", help_text="points, node-hours, JPY, USD…")
    # Latest GPU health-check result (TFLOP/s, bus bandwidth, …) shown in the hardware picker.
    measured = models.JSONField(default=dict, blank=True)
    enabled = models.BooleanField(default=True)

    class Meta:
        ordering = ["cluster__name", "gpus_per_node", "name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.cluster.slug})"

    @property
    def speed_per_rate(self) -> float | None:
        """Measured TFLOP/s of a whole node per unit of price: what a researcher's budget buys."""
        tflops = (self.measured or {}).get("tflops")
        if not tflops or not self.rate:
            return None
        devices = max(self.gpus_per_node, 1)
        return float(tflops) * devices / float(self.rate)

    @property
    def gpu_label(self) -> str:
        if not self.gpus_per_node:
            return f"{self.cpus_per_node} CPUs"
        return f"{self.gpus_per_node}×{(self.gpu_model or 'GPU').upper()}"


def default_kernels() -> list[str]:
    return ["python3"]


class Software(models.Model):
    """A container image or a set of environment modules researchers can pick."""

    class Kind(models.TextChoices):
        CONTAINER = "container", "Container image (Apptainer on HPC, the image itself on cloud)"
        MODULES = "modules", "Environment modules"

    slug = models.SlugField(unique=True, max_length=50, validators=[slug_validator])
    name = models.CharField(max_length=200)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    image = models.CharField(max_length=500, blank=True, help_text="docker://nvcr.io/nvidia/pytorch:24.05-py3 or a .sif path")
    modules = models.JSONField(default=list, blank=True, help_text='e.g. ["cuda/12.4", "python/3.11"]')
    setup = models.TextField(blank=True, help_text="shell lines run before the payload, e.g. activating a virtualenv")
    # What a job can rely on once this software is loaded; job templates say what they need (their `requires`),
    # and the form picks software that provides it on the chosen cluster.
    provides = models.JSONField(default=list, blank=True,
                                help_text='what jobs can use once it is loaded, e.g. ["torch", "papermill"]')
    # A notebook runs with papermill and a kernel inside this software, never the portal's: only these are offered.
    kernels = models.JSONField(default=default_kernels, blank=True,
                               help_text='Jupyter kernels this software provides for notebook jobs, e.g. ["python3"]')
    description = models.TextField(blank=True)
    clusters = models.ManyToManyField("clusters.Cluster", related_name="software", blank=True)
    # Restrict to some projects; none chosen = every project with access to one of the clusters.
    projects = models.ManyToManyField("projects.Project", related_name="software", blank=True)
    enabled = models.BooleanField(default=True)

    class Meta:
        ordering = ["name"]
        verbose_name_plural = "software"

    def __str__(self) -> str:
        return self.name

    def provides_all(self, needs) -> bool:
        return set(needs) <= set(self.provides or ())


class Preset(models.Model):
    """A one-click hardware choice ("Run on 8×A100") resolved to the matching hardware a project may use."""

    slug = models.SlugField(unique=True, max_length=50, validators=[slug_validator])
    label = models.CharField(max_length=100)
    gpu_model = models.CharField(max_length=32, blank=True, help_text="blank = any GPU model")
    gpus_per_node = models.PositiveIntegerField(default=0)
    nodes = models.PositiveIntegerField(default=1)
    order = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["order", "label"]

    def __str__(self) -> str:
        return self.label


class CloudPrice(models.Model):
    """What one instance type costs per hour in one region, on demand or on Spot: the price table cloud hardware
    is charged from. A site admin edits it (or refreshes it from the AWS Pricing API); every hardware type of an
    AWS Batch cluster in that region with that instance type and market takes its rate from here
    (portal/catalog/prices.py), so estimates, reservations, burn and settlement all use it."""

    class Market(models.TextChoices):
        ON_DEMAND = "on-demand", "On demand"
        SPOT = "spot", "Spot"

    region = models.CharField(max_length=32, help_text="e.g. ap-northeast-1")
    instance_type = models.CharField(max_length=64, help_text="e.g. p4d.24xlarge")
    market = models.CharField(max_length=16, choices=Market.choices, default=Market.ON_DEMAND)
    price_per_hour = models.DecimalField(max_digits=12, decimal_places=4, help_text="per instance (node) and hour")
    currency = models.CharField(max_length=16, default="USD")
    source = models.CharField(max_length=32, default="site admin", editable=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["region", "instance_type", "market"]
        constraints = [models.UniqueConstraint(fields=["region", "instance_type", "market"], name="one_price_per_offer")]

    def __str__(self) -> str:
        return f"{self.instance_type} {self.market} in {self.region}: {self.price_per_hour} {self.currency}/h"
