from django.apps import AppConfig


class DevConfig(AppConfig):
    name = "portal.dev"
    label = "dev"
    verbose_name = "Development scaffolding"
