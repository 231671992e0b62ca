"""Clients of the native protocol: admin, producer, consumer; async and sync."""

from tideway.native.client import TidewayClient
from tideway.native.consumer import Consumer
from tideway.native.group import GroupConsumer
from tideway.native.producer import Producer, RecordMetadata
from tideway.native.queue import Message, QueueConsumer
from tideway.native.sync import (
    SyncClient,
    SyncConsumer,
    SyncGroupConsumer,
    SyncProducer,
    SyncQueueConsumer,
)
from tideway.native.transactions import TransactionalProducer
from tideway.record.batch import Record

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
    "TransactionalProducer",
]
