from django.apps import AppConfig


class ClustersConfig(AppConfig):
    name = "portal.clusters"
    label = "clusters"

    def ready(self) -> None:
        from portal.clusters import signals  # noqa: F401 - connects the access-change audit receivers
