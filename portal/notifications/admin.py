from django.contrib import admin

from portal.notifications.models import Notification, Preference


@admin.register(Notification)
class NotificationAdmin(admin.ModelAdmin):
    list_display = ["user", "kind", "text", "created_at", "read_at"]
    list_filter = ["kind"]
    search_fields = ["user__username", "text"]
    readonly_fields = ["user", "job", "sweep", "project", "kind", "text", "created_at"]


@admin.register(Preference)
class PreferenceAdmin(admin.ModelAdmin):
    list_display = ["user", *Preference.CHOICES]
