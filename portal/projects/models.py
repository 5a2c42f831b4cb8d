from __future__ import annotations

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models

slug_validator = RegexValidator(r"^[a-z0-9][a-z0-9-]{0,49}$", "lower-case letters, digits and '-' only")


class Role(models.TextChoices):
    OWNER = "owner", "Owner"
    ADMIN = "admin", "Admin"
    MEMBER = "member", "Member"
    VIEWER = "viewer", "Viewer"


# What each role may do. Site staff may do everything everywhere.
ROLE_PERMISSIONS: dict[str, frozenset[str]] = {
    Role.VIEWER: frozenset({"view"}),
    Role.MEMBER: frozenset({"view", "submit"}),
    Role.ADMIN: frozenset({"view", "submit", "manage", "manage_jobs"}),
    Role.OWNER: frozenset({"view", "submit", "manage", "manage_jobs"}),
}


class Project(models.Model):
    slug = models.SlugField(unique=True, max_length=50, validators=[slug_validator])
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # Forgotten-job guards: the longest walltime any job of the project may ask for, and when to remind
    # the submitter that a job is still running.
    max_walltime_hours = models.PositiveIntegerField(null=True, blank=True)
    remind_after_hours = models.PositiveIntegerField(null=True, blank=True, default=24)
    # Bytes the project's shared storage may hold (files and uploads under way); blank: the site's default
    # (KAKEHASHI_STORAGE_QUOTA_BYTES); 0: no limit. Set by site admins.
    storage_quota_bytes = models.PositiveBigIntegerField(null=True, blank=True)
    # The site's own project (health checks and other operations): its jobs, submitted by site staff, run as the
    # project's service account on each cluster (`manage.py service_account`), whatever the cluster's identity mode.
    operations = models.BooleanField(
        default=False, help_text="The site's operations project: site staff's jobs in it run as its service accounts."
    )
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, through="Membership", related_name="projects")

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Membership(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "project"], name="one_membership_per_user")]
        ordering = ["project", "user"]

    def __str__(self) -> str:
        return f"{self.user} in {self.project} ({self.role})"

    def can(self, permission: str) -> bool:
        return permission in ROLE_PERMISSIONS[self.role]
