from django.apps import AppConfig


class LagConfig(AppConfig):
    name = "lag"
    label = "lag"
    verbose_name = "Consumer lag"
    default_auto_field = "django.db.models.BigAutoField"
