from tideway_server.registry.models.schemas import CompatibilityConfig, Schema, SubjectVersion

__all__ = ["CompatibilityConfig", "Schema", "SubjectVersion"]
