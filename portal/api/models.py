from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class Scope(models.TextChoices):
    READ = "read", "read — see projects, hardware, jobs, logs, budgets and files"
    SUBMIT = "submit", "submit — submit and cancel jobs, upload files"
    ADMIN = "admin", "admin — everything, including future admin endpoints"


class ApiToken(models.Model):
    """A personal access token for the API and the CLI. Only the SHA-256 of the secret is stored."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100)
    # The first characters of the secret, so a person can tell their tokens apart ("kh_AbCd1234…").
    prefix = models.CharField(max_length=16)
    digest = models.CharField(max_length=64, unique=True, editable=False)
    scopes = models.JSONField(default=list)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    last_used_ip = models.GenericIPAddressField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…) of {self.user}"

    def allows(self, scope: str) -> bool:
        return Scope.ADMIN in self.scopes or scope in self.scopes

    @property
    def is_expired(self) -> bool:
        return self.expires_at is not None and self.expires_at <= timezone.now()

    @property
    def status(self) -> str:
        if self.revoked_at is not None:
            return "revoked"
        if self.is_expired:
            return "expired"
        return "active"
