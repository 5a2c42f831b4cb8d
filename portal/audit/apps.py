from django.apps import AppConfig


class AuditConfig(AppConfig):
    name = "portal.audit"
    label = "audit"

    def ready(self) -> None:
        from portal.audit import signals  # noqa: F401 - connects the receivers
