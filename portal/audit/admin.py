from django.contrib import admin

from portal.audit.models import AuditEntry


@admin.register(AuditEntry)
class AuditEntryAdmin(admin.ModelAdmin):
    list_display = ["created_at", "actor", "ip", "action", "project", "target_type", "target_id"]
    list_filter = ["action", "created_at", "project"]
    search_fields = ["actor__username", "action", "ip", "target_id"]
    date_hierarchy = "created_at"

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def has_add_permission(self, request):
        return False
