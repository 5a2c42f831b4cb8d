from django.contrib import admin

from portal.hub.models import HubUserMapping


@admin.register(HubUserMapping)
class HubUserMappingAdmin(admin.ModelAdmin):
    list_display = ["hub_username", "user", "note", "created_at"]
    search_fields = ["hub_username", "user__username", "note"]
    autocomplete_fields = ["user"]
