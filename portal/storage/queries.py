"""What of storage a person can see: files and datasets of the projects they can see, their own uploads; nothing
else."""

from __future__ import annotations

from django.db.models import QuerySet

from portal.projects import access
from portal.projects.models import Project
from portal.storage.models import Dataset, StoredFile, UploadSession


def visible_files(user) -> QuerySet[StoredFile]:
    return StoredFile.objects.filter(project__in=access.visible_projects(user)).select_related("project", "uploaded_by")


def visible_datasets(user, project: Project) -> QuerySet[Dataset]:
    access.require(user, project, "view")
    return Dataset.objects.filter(project=project).select_related("stored_file", "cluster")


def visible_uploads(user) -> QuerySet[UploadSession]:
    """A person's own uploads in projects they can still see: an upload belongs to whoever started it."""
    return UploadSession.objects.filter(created_by=user, project__in=access.visible_projects(user)).select_related(
        "project", "stored_file")
