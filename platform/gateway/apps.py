from django.apps import AppConfig


class GatewayConfig(AppConfig):
    """The data gateway: publish and consume over REST and WebSockets."""

    name = "tideway_server.gateway"
    label = "gateway"
    default_auto_field = "django.db.models.BigAutoField"
