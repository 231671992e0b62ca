from django.apps import AppConfig


class AlertsConfig(AppConfig):
    name = "tideway_server.alerts"
    label = "alerts"
    verbose_name = "Alert rules and notifications"
    default_auto_field = "django.db.models.BigAutoField"
