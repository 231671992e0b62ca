from django.apps import AppConfig


class ClustersConfig(AppConfig):
    name = "tideway_server.clusters"
    label = "clusters"
    verbose_name = "Broker clusters"
    default_auto_field = "django.db.models.BigAutoField"
