"""Browser tests use the gateway deployment of tests/gateway."""

from tests.gateway.conftest import gateway

__all__ = ["gateway"]
