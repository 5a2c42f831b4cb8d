from django.apps import AppConfig


class HubConfig(AppConfig):
    name = "portal.hub"
    label = "hub"
    verbose_name = "JupyterHub"

    def ready(self) -> None:
        from portal.hub import schema  # noqa: F401 - registers the hub token's OpenAPI scheme
