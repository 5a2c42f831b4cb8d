from django.apps import AppConfig


class SamplesConfig(AppConfig):
    name = "portal.samples"
    label = "samples"
    default_auto_field = "django.db.models.BigAutoField"
