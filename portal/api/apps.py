from django.apps import AppConfig


class ApiConfig(AppConfig):
    name = "portal.api"
    label = "api"
    verbose_name = "API"

    def ready(self) -> None:
        # Registers the bearer-token scheme with drf-spectacular.
        from portal.api import schema  # noqa: F401
