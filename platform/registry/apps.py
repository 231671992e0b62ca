from django.apps import AppConfig


class RegistryConfig(AppConfig):
    name = "tideway_server.registry"
    label = "registry"
    verbose_name = "Schema registry"
    default_auto_field = "django.db.models.BigAutoField"
