from django.apps import AppConfig


class ClustersConfig(AppConfig):
    name = "portal.clusters"
    label = "clusters"
