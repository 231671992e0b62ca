from django.apps import AppConfig


class TenantsConfig(AppConfig):
    name = "tideway_server.tenants"
    label = "tenants"
    verbose_name = "Tenants"
    default_auto_field = "django.db.models.BigAutoField"
