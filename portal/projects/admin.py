from django.contrib import admin

from portal.projects.models import Membership, Project


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 1
    autocomplete_fields = ["user"]


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "max_walltime_hours", "remind_after_hours", "storage_quota_bytes", "created_at"]
    search_fields = ["slug", "name"]
    prepopulated_fields = {"slug": ["name"]}
    # The clusters app adds its allocations here (portal/clusters/admin.py): projects know nothing of clusters.
    inlines = [MembershipInline]
