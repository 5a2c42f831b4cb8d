from __future__ import annotations

from django.conf import settings
from django.db import models


class Kind(models.TextChoices):
    ENDED = "ended", "A job ended"
    FAILED = "failed", "A job failed or ran out of time"
    BUDGET = "budget", "A job was cancelled by its project's budget"


class Notification(models.Model):
    """One thing a person is told, in the portal's bell and (if they want) by email."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notifications")
    job = models.ForeignKey("jobs.Job", null=True, blank=True, on_delete=models.CASCADE, related_name="notifications")
    kind = models.CharField(max_length=8, choices=Kind.choices)
    text = models.CharField(max_length=500)
    created_at = models.DateTimeField(auto_now_add=True)
    read_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["user", "read_at"], name="notification_unread")]

    def __str__(self) -> str:
        return self.text


class Preference(models.Model):
    """How a person wants to hear of each kind of event; no row = the defaults below."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notification_preference")
    portal_ended = models.BooleanField("In the portal when a job ends", default=True)
    portal_failed = models.BooleanField("In the portal when a job fails", default=True)
    portal_budget = models.BooleanField("In the portal when the budget cancels a job", default=True)
    email_ended = models.BooleanField("By email when a job ends", default=False)
    email_failed = models.BooleanField("By email when a job fails", default=True)
    email_budget = models.BooleanField("By email when the budget cancels a job", default=True)

    def wants(self, channel: str, kind: str) -> bool:
        return bool(getattr(self, f"{channel}_{kind}"))
