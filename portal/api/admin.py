from django.contrib import admin

from portal.api.models import ApiToken


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ("name", "user", "prefix", "scopes", "created_at", "expires_at", "revoked_at", "last_used_at")
    list_filter = ("revoked_at",)
    search_fields = ("name", "prefix", "user__username")
    # Tokens are issued from Settings → API tokens or `manage.py issue_token`; here they can only be inspected.
    readonly_fields = ("user", "name", "prefix", "scopes", "created_at", "expires_at", "last_used_at", "last_used_ip")
    exclude = ("digest",)

    def has_add_permission(self, request) -> bool:
        return False
