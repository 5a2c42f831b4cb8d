"""What every job really uses, and the rule that acts on idle GPUs (docs/decisions/0044, 0045).

An app of its own rather than more of portal/jobs: the series and the rule read jobs, events and cancels, and the
job pages read them back by relation name only (`job.samples`), so jobs never import this app.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models


class JobSamples(models.Model):
    """One row per job that has sampled: the bounded series, where each node file was read up to, the summary
    the pages and the API show, and where the idle rule stands for it."""

    class State(models.TextChoices):
        BUSY = "busy", "Busy"
        IDLE = "idle", "Idle"
        PARTLY_IDLE = "partly_idle", "Partly idle"
        UNKNOWN = "unknown", "Not known"
        EXEMPT = "exempt", "Exempt"

    job = models.OneToOneField("jobs.Job", on_delete=models.CASCADE, primary_key=True, related_name="samples")
    offsets = models.JSONField(default=dict, blank=True)  # node file → bytes already read
    series = models.JSONField(default=dict, blank=True)  # portal/samples/series.py: bounded
    summary = models.JSONField(default=dict, blank=True)  # series.Summary.as_dict()
    fetched_at = models.DateTimeField(null=True, blank=True)
    last_sample_at = models.DateTimeField(null=True, blank=True)
    complete = models.BooleanField(default=False)  # the last bytes were read after the job ended
    state = models.CharField(max_length=12, choices=State.choices, default=State.UNKNOWN, db_index=True)
    state_why = models.CharField(max_length=300, blank=True)
    idle_since = models.DateTimeField(null=True, blank=True)
    # The warnings (seconds of idleness) already sent for the present idle stretch.
    warned = models.JSONField(default=list, blank=True)
    keep_until = models.DateTimeField(null=True, blank=True)
    kept_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                related_name="+")
    keeps = models.PositiveIntegerField(default=0)  # how many times its owner kept it: counted, never hidden

    class Meta:
        # The rows still to read once their job ended: a handful, found without reading the others.
        indexes = [models.Index(fields=["complete"], condition=models.Q(complete=False), name="samples_incomplete")]

    def __str__(self) -> str:
        return f"samples of job {self.job_id} ({self.state})"


class IdleRule(models.Model):
    """A project's rule for idle GPUs, set by its admins within the site's bounds (settings KAKEHASHI_IDLE_*).
    A project without one follows the site's rule."""

    class Action(models.TextChoices):
        TELL = "tell", "Tell the owner"
        CANCEL = "cancel", "Cancel unless kept"

    project = models.OneToOneField("projects.Project", on_delete=models.CASCADE, related_name="idle_rule")
    threshold_percent = models.FloatField(default=5.0, help_text="a GPU below this utilisation is idle")
    window_seconds = models.PositiveIntegerField(default=3600, help_text="idle for this long: the job is idle")
    warn_at_seconds = models.JSONField(default=list, blank=True, help_text="warn its owner at these idle times")
    action = models.CharField(max_length=8, choices=Action.choices, default=Action.TELL)
    cancel_after_seconds = models.PositiveIntegerField(default=7200)
    keep_max_hours = models.PositiveIntegerField(default=24, help_text="the longest an owner may keep an idle job")
    exempt_busy_gpus = models.PositiveIntegerField(default=1, help_text="jobs with this many busy GPUs are busy")
    exempt_users = models.JSONField(default=list, blank=True, help_text="usernames the rule leaves alone")
    exempt_hardware = models.JSONField(default=list, blank=True, help_text="hardware type slugs left alone")
    exempt_sessions_under_hours = models.FloatField(default=0)
    updated_at = models.DateTimeField(auto_now=True)
    updated_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")

    def __str__(self) -> str:
        return f"idle rule of {self.project_id}"
