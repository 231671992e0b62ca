"""Clients of the native protocol: admin, producer, consumer; async and sync."""

from brokers.client.client import TidewayClient
from brokers.client.consumer import Consumer
from brokers.client.producer import Producer, RecordMetadata
from brokers.client.sync import SyncClient, SyncConsumer, SyncProducer
from brokers.record.batch import Record

__all__ = [
    "Consumer",
    "Producer",
    "Record",
    "RecordMetadata",
    "SyncClient",
    "SyncConsumer",
    "SyncProducer",
    "TidewayClient",
]
