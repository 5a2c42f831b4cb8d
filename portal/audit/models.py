from django.conf import settings
from django.db import models


class AuditEntry(models.Model):
    """Who did what to which object from where, written in the same transaction as the change itself."""

    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    action = models.CharField(max_length=64, db_index=True)
    project = models.ForeignKey("projects.Project", null=True, blank=True, on_delete=models.SET_NULL)
    target_type = models.CharField(max_length=64, blank=True)
    target_id = models.CharField(max_length=64, blank=True)
    ip = models.GenericIPAddressField(null=True, blank=True, db_index=True, verbose_name="IP address",
                                      help_text="Where the request came from; empty for workers and commands")
    data = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-id"]
        verbose_name_plural = "audit entries"

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M} {self.actor} {self.action} {self.target_type}#{self.target_id}"
