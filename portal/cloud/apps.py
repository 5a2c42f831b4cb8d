from django.apps import AppConfig


class CloudConfig(AppConfig):
    name = "portal.cloud"
    label = "cloud"
    verbose_name = "Cloud"
