from __future__ import annotations

from django.conf import settings
from django.db import models


class Kind(models.TextChoices):
    """What a person is told of. The kind of a job's notice comes from the cause of the event that ended it
    (portal/jobs/notices.py), never from its words."""

    ENDED = "ended", "A job completed"
    FAILED = "failed", "A job failed"
    TIMED_OUT = "timed_out", "A job ran out of time"
    LOST = "lost", "A job was lost"
    CANCELLED = "cancelled", "A job was cancelled by someone else"
    BUDGET = "budget", "A job was cancelled by its project's strict budget"
    SWEEP = "sweep", "A sweep ended"
    SWEEP_FAILED = "sweep_failed", "A sweep ended with points that did not complete"
    BUDGET_ALERT = "budget_alert", "A project's budget passed a threshold"
    REMINDER = "reminder", "A job has been running for long"
    IDLE = "idle", "A job's GPUs are idle"
    DIGEST = "digest", "The week's GPU use"


# What each kind is chosen under in Settings → Notifications: one choice per topic and channel.
TOPICS = {
    Kind.ENDED: "ended", Kind.SWEEP: "ended",
    Kind.FAILED: "failed", Kind.TIMED_OUT: "failed", Kind.LOST: "failed", Kind.SWEEP_FAILED: "failed",
    Kind.CANCELLED: "cancelled",
    Kind.BUDGET: "budget",
    Kind.BUDGET_ALERT: "alerts",
    Kind.REMINDER: "reminders",
    Kind.IDLE: "idle",
    Kind.DIGEST: "digest",
}


class Notification(models.Model):
    """One thing a person is told, in the portal's bell and (if they want) by email."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notifications")
    job = models.ForeignKey("jobs.Job", null=True, blank=True, on_delete=models.CASCADE, related_name="notifications")
    sweep = models.ForeignKey("jobs.JobGroup", null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    project = models.ForeignKey("projects.Project", null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    text = models.CharField(max_length=500)
    created_at = models.DateTimeField(auto_now_add=True)
    read_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["user", "read_at"], name="notification_unread")]

    def __str__(self) -> str:
        return self.text


class Preference(models.Model):
    """How a person wants to hear of each topic (TOPICS); no row = the defaults below."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notification_preference")
    portal_ended = models.BooleanField("In the portal when a job or a sweep ends", default=True)
    portal_failed = models.BooleanField("In the portal when a job fails, runs out of time or is lost", default=True)
    portal_cancelled = models.BooleanField("In the portal when someone else (an admin, the cluster) cancels a job",
                                           default=True)
    portal_budget = models.BooleanField("In the portal when the budget cancels a job", default=True)
    portal_alerts = models.BooleanField("In the portal when a project I manage passes a budget threshold", default=True)
    portal_reminders = models.BooleanField("In the portal when a job has been running for long", default=True)
    email_ended = models.BooleanField("By email when a job or a sweep ends", default=False)
    email_failed = models.BooleanField("By email when a job fails, runs out of time or is lost", default=True)
    email_cancelled = models.BooleanField("By email when someone else (an admin, the cluster) cancels a job",
                                          default=True)
    email_budget = models.BooleanField("By email when the budget cancels a job", default=True)
    email_alerts = models.BooleanField("By email when a project I manage passes a budget threshold", default=True)
    email_reminders = models.BooleanField("By email when a job has been running for long", default=True)
    portal_idle = models.BooleanField("In the portal when a job's GPUs are idle (warnings, and the cancel)",
                                      default=True)
    email_idle = models.BooleanField("By email when a job's GPUs are idle (warnings, and the cancel)", default=True)
    portal_digest = models.BooleanField("In the portal: the week's GPU use, used and idle", default=True)
    email_digest = models.BooleanField("By email: the week's GPU use, used and idle", default=True)

    CHOICES = ("portal_ended", "portal_failed", "portal_cancelled", "portal_budget", "portal_alerts",
               "portal_reminders", "email_ended", "email_failed", "email_cancelled", "email_budget", "email_alerts",
               "email_reminders", "portal_idle", "email_idle", "portal_digest",
               "email_digest")

    def wants(self, channel: str, kind: str) -> bool:
        return bool(getattr(self, f"{channel}_{TOPICS[kind]}"))
