from django.contrib import admin

from portal.admin_mixins import Permanent
from portal.audit.models import AuditEntry


@admin.register(AuditEntry)
class AuditEntryAdmin(Permanent, admin.ModelAdmin):
    list_display = ["created_at", "actor", "ip", "action", "project", "target_type", "target_id"]
    list_filter = ["action", "created_at", "project"]
    search_fields = ["actor__username", "action", "ip", "target_id"]
    date_hierarchy = "created_at"
