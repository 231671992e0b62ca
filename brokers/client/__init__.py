"""Clients of the native protocol: admin, producer, consumer; async and sync."""

from brokers.client.client import TidewayClient
from brokers.client.consumer import Consumer
from brokers.client.group import GroupConsumer
from brokers.client.producer import Producer, RecordMetadata
from brokers.client.queue import Message, QueueConsumer
from brokers.client.sync import (
    SyncClient,
    SyncConsumer,
    SyncGroupConsumer,
    SyncProducer,
    SyncQueueConsumer,
)
from brokers.record.batch import Record

__all__ = [
    "Consumer",
    "GroupConsumer",
    "Message",
    "QueueConsumer",
    "SyncGroupConsumer",
    "SyncQueueConsumer",
    "Producer",
    "Record",
    "RecordMetadata",
    "SyncClient",
    "SyncConsumer",
    "SyncProducer",
    "TidewayClient",
]
