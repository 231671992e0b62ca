from django.apps import AppConfig


class LagConfig(AppConfig):
    name = "tideway_server.lag"
    label = "lag"
    verbose_name = "Consumer lag"
    default_auto_field = "django.db.models.BigAutoField"
