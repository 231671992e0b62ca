from django.apps import AppConfig


class BillingConfig(AppConfig):
    name = "tideway_server.billing"
    label = "billing"
    verbose_name = "Plans and billing"
    default_auto_field = "django.db.models.BigAutoField"
