"""The broker process: asyncio server speaking the native protocol over the logs."""

from tideway_server.brokers.server.broker import Broker, BrokerConfig

__all__ = ["Broker", "BrokerConfig"]
