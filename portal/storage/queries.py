"""Which stored files a person can see: those of the projects they can see, nothing else."""

from __future__ import annotations

from django.db.models import QuerySet

from portal.projects import access
from portal.storage.models import StoredFile


def visible_files(user) -> QuerySet[StoredFile]:
    return StoredFile.objects.filter(project__in=access.visible_projects(user)).select_related("project", "uploaded_by")
