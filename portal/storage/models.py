from __future__ import annotations

from django.conf import settings
from django.db import models


class StoredFile(models.Model):
    """A file in a project's shared storage: its place in the project (`path`) and where the bytes are.

    The bytes live in Django's default storage (the file system today, an S3 bucket later) under
    `storage_name`, normally `projects/<slug>/<path>`; nothing else in the portal opens them directly.
    """

    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="files")
    path = models.CharField(max_length=512)
    # The key in default_storage. Kept apart from `path`: a replaced file is written under a fresh key first
    # and the old bytes deleted after the switch, so a reader never sees a half-written file.
    storage_name = models.CharField(max_length=1024)
    size = models.PositiveBigIntegerField()
    sha256 = models.CharField(max_length=64)
    uploaded_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["project__slug", "path"]
        constraints = [models.UniqueConstraint(fields=["project", "path"], name="one_file_per_project_path")]

    def __str__(self) -> str:
        return f"{self.project.slug}:{self.path}"

    @property
    def filename(self) -> str:
        return self.path.rsplit("/", 1)[-1]
