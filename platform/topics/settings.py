"""How a queue's settings become broker topic settings."""

from __future__ import annotations

from tideway_server.topics.choices import QueueMode


# Queue fields that map to broker topic settings, and how.
def broker_configs(queue) -> dict[str, str]:
    configs = {
        "retention.ms": str(queue.retention_ms),
        "retention.bytes": str(queue.retention_bytes),
        # Compaction keeps the latest record per key, and retention still applies (plans cap retention).
        "cleanup.policy": "compact,delete" if queue.compaction else "delete",
        "max.message.bytes": str(queue.max_message_bytes),
        "min.insync.replicas": str(min(2, queue.replication_factor)),
    }
    if queue.mode == QueueMode.QUEUE:
        configs.update({
            "queue.visibility.timeout.ms": str(queue.visibility_timeout_ms),
            "queue.max.deliveries": str(queue.max_deliveries),
            "queue.delivery.delay.ms": str(queue.delivery_delay_ms),
            "queue.fifo": "true" if queue.fifo else "false",
            "queue.dead.letter.topic": queue.dead_letter_target,
        })
    return configs


def dead_letter_configs(queue) -> dict[str, str]:
    """The dead-letter topic keeps what it holds as long as the queue would, never compacted."""
    return {
        "retention.ms": str(queue.retention_ms),
        "retention.bytes": str(queue.retention_bytes),
        "max.message.bytes": str(queue.max_message_bytes + 4096),  # room for the dead-letter headers
        "min.insync.replicas": str(min(2, queue.replication_factor)),
    }
