from django.contrib import admin

from portal.accounts.models import SiteSettings


@admin.register(SiteSettings)
class SiteSettingsAdmin(admin.ModelAdmin):
    list_display = ["__str__", "signup_open"]

    def has_add_permission(self, request):
        return not SiteSettings.objects.exists()
