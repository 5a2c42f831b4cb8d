"""Read helpers for jobs."""

from __future__ import annotations

from django.db.models import QuerySet

from portal.jobs.models import Job
from portal.projects import access


def visible_jobs(user) -> QuerySet[Job]:
    """Jobs of the projects `user` can see: the one filter every job page and API call starts from."""
    return Job.objects.filter(project__in=access.visible_projects(user)).select_related(
        "project", "user", "cluster", "hardware", "software"
    )
