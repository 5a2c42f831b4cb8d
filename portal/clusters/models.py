from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ObjectDoesNotExist
from django.core.validators import RegexValidator
from django.db import models
from django.utils.functional import cached_property

from backends import kind_choices
from portal import crypto
from portal.projects.models import slug_validator

username_validator = RegexValidator(r"^[a-z_][a-z0-9_.-]{0,31}$", "a POSIX user name (lower-case, digits, '_.-')")


# A cluster is of a kind the backend registry knows (backends/__init__.py), and only those are offered to admins:
# Kind.SLURM == "slurm", and a new backend's kind appears here with its registry entry.
Kind = models.TextChoices("Kind", [(kind.upper().replace("-", "_"), (kind, label)) for kind, label in kind_choices()])


class SiteProfile(models.TextChoices):
    GENERIC = "generic", "Generic"
    TSUBAME = "tsubame", "TSUBAME (qsub -g, f_node/h_node/q_node/s_gpu)"
    ABCI = "abci", "ABCI (qsub -g, rt_AF/rt_AG)"


class IdentityMode(models.TextChoices):
    PER_USER = "per_user", "Each researcher's own account"
    PROJECT = "project", "A per-project service account (where the centre permits)"


class Cluster(models.Model):
    slug = models.SlugField(unique=True, max_length=50, validators=[slug_validator])
    name = models.CharField(max_length=200)
    kind = models.CharField(max_length=16, choices=kind_choices)
    site_profile = models.CharField(max_length=16, choices=SiteProfile.choices, default=SiteProfile.GENERIC)
    description = models.TextField(blank=True)
    login_host = models.CharField(max_length=255, blank=True)
    login_port = models.PositiveIntegerField(default=22)
    # Pinned host key(s) in known_hosts format. Connections to a host presenting any other key are refused.
    host_keys = models.TextField(blank=True, help_text="known_hosts lines, e.g. [login.example.ac.jp]:22 ssh-ed25519 AAAA…")
    identity_mode = models.CharField(max_length=10, choices=IdentityMode.choices, default=IdentityMode.PER_USER)
    # Scheduler options for this cluster, e.g. {"dialect": "torque"}, {"accounting": "sacct"}, {"queue": "gpu"};
    # {"data_cache": "/gs/bs/{group}/.kakehashi/cache"}: datasets staged into the project's group area, shared by its
    # members (docs/decisions/0027); without it, each account's own ~/.kakehashi/cache.
    options = models.JSONField(default=dict, blank=True)
    # Where job directories go on the cluster, relative to the account's home (or absolute).
    work_root = models.CharField(max_length=255, default="kakehashi-jobs")
    enabled = models.BooleanField(default=True)
    # Why it is switched off, where the portal switched it off (a cloud cluster torn down): pages say so.
    disabled_reason = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # What the tracker last heard: shown next to jobs, so a silent login node is not mistaken for idle jobs.
    last_contact_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @cached_property
    def known_health(self) -> ClusterHealth | None:
        """What the health beat last recorded of it (select_related("health") spares the query), or None."""
        try:
            return self.health
        except ObjectDoesNotExist:
            return None

    @property
    def unreachable_reason(self) -> str:
        """Why the portal cannot reach it now, "" while it answers: the tracker's last failure (cleared by its next
        answer), else the health beat's, unless the tracker has heard from it since."""
        if self.last_error:
            return self.last_error
        health = self.known_health
        if health is not None and not health.reachable and (
                self.last_contact_at is None or health.error_at is None or health.error_at > self.last_contact_at):
            return health.last_error or "the health check got no answer"
        return ""

    @property
    def last_answered_at(self):
        """When it last answered the portal (the tracker or the health beat), None if never: while it does not
        answer, it is unreachable since then."""
        health = self.known_health
        times = [t for t in (self.last_contact_at, health.answered_at if health is not None else None) if t]
        return max(times) if times else None


class ClusterAccount(models.Model):
    """An identity on a cluster: a researcher's own account, or a project's service account."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="accounts")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE, related_name="cluster_accounts"
    )
    project = models.ForeignKey(
        "projects.Project", null=True, blank=True, on_delete=models.CASCADE, related_name="cluster_accounts"
    )
    username = models.CharField(max_length=32, validators=[username_validator])
    public_key = models.TextField()
    private_key_encrypted = models.TextField(editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    verified_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["cluster", "user"], name="one_account_per_user_and_cluster"),
            models.UniqueConstraint(fields=["cluster", "project"], name="one_service_account_per_project"),
            models.CheckConstraint(
                condition=models.Q(user__isnull=False) ^ models.Q(project__isnull=False),
                name="account_belongs_to_user_xor_project",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.username}@{self.cluster.slug}"

    def set_private_key(self, pem: str) -> None:
        self.private_key_encrypted = crypto.encrypt(pem)

    def private_key(self) -> str:
        return crypto.decrypt(self.private_key_encrypted)


class Allocation(models.Model):
    """A project's grant on a cluster, and the scheduler group/account its jobs are charged to there."""

    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="allocations")
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="allocations")
    group = models.CharField(
        max_length=64,
        blank=True,
        validators=[RegexValidator(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$", "letters, digits, '._-'")],
        help_text="TSUBAME/ABCI -g group, Slurm account (-A), PBS/SGE project (-P)",
    )
    # Hardware types the project may use on this cluster; none chosen = all of them.
    hardware = models.ManyToManyField("catalog.HardwareType", blank=True)
    # The project's own storage there (a TSUBAME group disk, /gs/bs/tga-GROUP): paths registered as datasets
    # must resolve inside it. Blank: no cluster path may be registered for this project on this cluster.
    data_root = models.CharField(
        max_length=1024, blank=True,
        validators=[RegexValidator(r"^/[^\x00-\x1f\x7f]*$", "an absolute path without control characters")],
        help_text="absolute path of the project's storage on this cluster; registered datasets must lie inside it",
    )
    # The project's own choice within that grant (its owners and admins set it on the project's Clusters page):
    # whether its members use this cluster at all, and granted hardware types it chose not to use.
    in_use = models.BooleanField(default=True, help_text="set by the project: off = its members do not run here")
    unused_hardware = models.ManyToManyField("catalog.HardwareType", blank=True, related_name="+",
                                             help_text="granted hardware the project chose not to use")

    def granted_hardware(self):
        """What site admins granted here: the chosen hardware types, else every enabled one of the cluster."""
        chosen = self.hardware.all()
        return chosen if chosen.exists() else self.cluster.hardware.filter(enabled=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "cluster"], name="one_allocation_per_cluster")]

    def __str__(self) -> str:
        return f"{self.project} on {self.cluster} as {self.group or '-'}"


class CloudCredential(models.Model):
    """The access key a cloud cluster's API calls are made with, encrypted at rest like SSH keys.

    A cluster without one uses the worker's own credentials chain (an instance role or AWS_* variables), which is
    what a deployment on AWS should prefer: then no secret is stored at all.
    """

    cluster = models.OneToOneField(Cluster, on_delete=models.CASCADE, related_name="cloud_credential")
    access_key_id = models.CharField(max_length=128)
    secret_encrypted = models.TextField(editable=False)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.access_key_id[:4]}… for {self.cluster.slug}"

    def set_secret(self, secret: str) -> None:
        self.secret_encrypted = crypto.encrypt(secret)

    def secret(self) -> str:
        return crypto.decrypt(self.secret_encrypted)


class ClusterHealth(models.Model):
    """How a cluster was when the health beat last asked it (portal/clusters/health.py): whether it answered, why
    not, and how busy it is. Pages and the comparison before Run read this row; a web request never asks a
    scheduler (docs/decisions/0004). Unknown figures (a scheduler that does not say) are null."""

    cluster = models.OneToOneField(Cluster, on_delete=models.CASCADE, related_name="health")
    checked_at = models.DateTimeField()
    reachable = models.BooleanField(default=False)
    # The last time it answered, and what went wrong the last time it did not.
    answered_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    error_at = models.DateTimeField(null=True, blank=True)
    pending = models.PositiveIntegerField(null=True, blank=True)
    running = models.PositiveIntegerField(null=True, blank=True)
    free_nodes = models.PositiveIntegerField(null=True, blank=True)
    total_nodes = models.PositiveIntegerField(null=True, blank=True)
    expected_start = models.DateTimeField(null=True, blank=True)  # when the last waiting job should start
    per_queue = models.JSONField(default=dict, blank=True)  # pending jobs by partition/queue
    # Hardware (slug → why) whose queue cannot take a job now: not offered until the next check finds it back.
    unavailable = models.JSONField(default=dict, blank=True)

    def __str__(self) -> str:
        return f"{self.cluster.slug}: {'reachable' if self.reachable else 'unreachable'} at {self.checked_at:%H:%M}"
