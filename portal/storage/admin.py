from django.contrib import admin

from portal.admin_mixins import ShowOnly
from portal.storage.models import ClusterCache, Dataset, StoredFile, UploadSession


@admin.register(StoredFile)
class StoredFileAdmin(admin.ModelAdmin):
    list_display = ("path", "project", "size", "uploaded_by", "created_at")
    list_filter = ("project",)
    search_fields = ("path", "sha256")
    readonly_fields = ("project", "path", "storage_name", "size", "sha256", "uploaded_by", "created_at", "updated_at")


@admin.register(UploadSession)
class UploadSessionAdmin(ShowOnly, admin.ModelAdmin):
    """Uploads in flight and how they ended; they change only through the uploader (or the abandoned sweep)."""

    list_display = ("path", "project", "size", "state", "created_by", "created_at", "last_activity_at")
    list_filter = ("state", "project")
    search_fields = ("path", "sha256", "upload_id")


@admin.register(Dataset)
class DatasetAdmin(admin.ModelAdmin):
    """Datasets are named through the API (checked there, a registered path checked on the cluster by a worker)."""

    list_display = ("name", "project", "kind", "state", "size", "created_by", "created_at")
    list_filter = ("kind", "state", "project")
    search_fields = ("name", "prefix", "cluster_path")
    readonly_fields = ("project", "name", "kind", "stored_file", "prefix", "cluster", "cluster_path", "size", "sha256",
                       "state", "reason", "created_by", "created_at", "checked_at")

    def has_add_permission(self, request) -> bool:
        return False


@admin.register(ClusterCache)
class ClusterCacheAdmin(admin.ModelAdmin):
    """A project's dataset cache on a cluster: site admins set its limit (empty: KAKEHASHI_CLUSTER_CACHE_BYTES)."""

    list_display = ["project", "cluster", "files", "bytes", "limit_bytes", "pruned_files", "measured_at", "error"]
    readonly_fields = ["files", "bytes", "pruned_files", "pruned_bytes", "measured_at", "error"]
