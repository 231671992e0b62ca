from django.apps import AppConfig


class ControlPlaneConfig(AppConfig):
    name = "tideway_server.controlplane"
    label = "controlplane"
    verbose_name = "Tideway control plane"

    def ready(self) -> None:
        # How the API authenticates, for the OpenAPI document (drf-spectacular finds extensions by import).
        from tideway_server.controlplane.api import openapi  # noqa: F401
