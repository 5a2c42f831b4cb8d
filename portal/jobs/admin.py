from django.contrib import admin

from portal.admin_mixins import ShowOnly
from portal.jobs.models import Job, JobEvent


class JobEventInline(admin.TabularInline):
    model = JobEvent
    extra = 0
    readonly_fields = ["from_state", "to_state", "at", "reason", "actor"]
    can_delete = False


@admin.register(Job)
class JobAdmin(ShowOnly, admin.ModelAdmin):
    # State changes go through portal.jobs.actions (events, ledger): the admin only looks.
    list_display = ["id", "name", "project", "user", "cluster", "state", "scheduler_id", "created_at"]
    list_filter = ["state", "cluster", "project"]
    search_fields = ["name", "scheduler_id", "scheduler_name"]
    inlines = [JobEventInline]
