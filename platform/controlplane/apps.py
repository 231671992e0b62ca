from django.apps import AppConfig


class ControlPlaneConfig(AppConfig):
    name = "controlplane"
    verbose_name = "Tideway control plane"

    def ready(self) -> None:
        # How the API authenticates, for the OpenAPI document (drf-spectacular finds extensions by import).
        from controlplane.api import openapi  # noqa: F401
