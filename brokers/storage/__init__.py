"""Partition logs on disk: segments of RecordBatches with sparse indexes.

``Log`` is the one interface the broker uses for a partition replica;
``LogManager`` owns every log in a data directory, their configuration,
checkpoints and background retention.
"""

from brokers.storage.config import TopicConfig
from brokers.storage.log import Log, ReadResult
from brokers.storage.manager import LogManager

__all__ = ["Log", "LogManager", "ReadResult", "TopicConfig"]
