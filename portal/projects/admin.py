from django.contrib import admin

from portal.clusters.models import Allocation
from portal.projects.models import Membership, Project


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 1
    autocomplete_fields = ["user"]


class AllocationInline(admin.TabularInline):
    model = Allocation
    extra = 1
    filter_horizontal = ["hardware"]


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "max_walltime_hours", "remind_after_hours", "created_at"]
    search_fields = ["slug", "name"]
    prepopulated_fields = {"slug": ["name"]}
    inlines = [MembershipInline, AllocationInline]
