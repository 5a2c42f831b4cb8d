from django.apps import AppConfig


class UsageConfig(AppConfig):
    """No models: registered so that its admin module (what saving a budget does to running jobs) is loaded."""

    name = "portal.usage"
    default_auto_field = "django.db.models.BigAutoField"
