"""Partition logs on disk: segments of RecordBatches with sparse indexes.

``Log`` is the one interface the broker uses for a partition replica;
``LogManager`` owns every log in a data directory, their configuration,
checkpoints and background retention.
"""

from tideway_server.brokers.storage.config import TopicConfig
from tideway_server.brokers.storage.log import Log, ReadResult
from tideway_server.brokers.storage.manager import LogManager

__all__ = ["Log", "LogManager", "ReadResult", "TopicConfig"]
