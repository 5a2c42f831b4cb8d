from django.contrib import admin

from portal.storage.models import StoredFile


@admin.register(StoredFile)
class StoredFileAdmin(admin.ModelAdmin):
    list_display = ("path", "project", "size", "uploaded_by", "created_at")
    list_filter = ("project",)
    search_fields = ("path", "sha256")
    readonly_fields = ("project", "path", "storage_name", "size", "sha256", "uploaded_by", "created_at", "updated_at")
