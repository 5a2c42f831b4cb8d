from django.apps import AppConfig


class StorageConfig(AppConfig):
    name = "portal.storage"
    label = "storage"
    verbose_name = "Shared storage"
