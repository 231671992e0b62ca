"""Per-topic storage configuration, parsed from Kafka-style string settings."""

from __future__ import annotations

import re

import msgspec

from tideway.protocol.errors import InvalidConfigError, InvalidTopicError

__all__ = ["TopicConfig", "validate_topic_name"]

_TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,200}$")
DAY_MS = 24 * 3600 * 1000
MAX_VISIBILITY_TIMEOUT_MS = 12 * 3600 * 1000


def validate_topic_name(name: str) -> None:
    """Raise InvalidTopicError unless ``name`` is a legal topic name."""
    if not isinstance(name, str) or not _TOPIC_NAME.match(name) or name in (".", ".."):
        raise InvalidTopicError(
            f"invalid topic name {name!r}: use 1-200 characters of letters, digits, '.', '_' and '-'"
        )


class TopicConfig(msgspec.Struct, frozen=True, kw_only=True):
    """How one topic's partitions are stored. Units are in the names."""

    partitions: int = 1
    replication_factor: int = 1
    # fsync policy: flush_interval_ms = 0 -> fsync before every acknowledgement
    # ("always"); > 0 -> fsync every that many ms; -1 -> leave it to the page
    # cache and replication ("none").
    flush_interval_ms: int = -1
    retention_ms: int = 7 * DAY_MS  # -1 keeps data forever
    retention_bytes: int = -1  # per partition; -1 means no size limit
    segment_bytes: int = 1 << 30
    segment_ms: int = 7 * DAY_MS
    max_message_bytes: int = 1 << 20  # largest batch a producer may send
    index_interval_bytes: int = 4096
    # acks=all needs this many in-sync replicas (capped at the replication factor).
    min_insync_replicas: int = 2
    # "delete" (retention), "compact" (latest value per key) or "compact,delete".
    cleanup_policy: str = "delete"
    delete_retention_ms: int = DAY_MS  # how long compaction keeps a tombstone
    # Queue model (shared consumption with per-message acks), per topic.
    visibility_timeout_ms: int = 30_000  # default lock on an acquired record
    max_deliveries: int = 5  # deliveries before a record is dead-lettered
    retry_backoff_ms: int = 1_000  # first redelivery delay after a release (doubles, with jitter)
    retry_backoff_max_ms: int = 60_000
    delivery_delay_ms: int = 0  # default delay of every message (a deliver-at header overrides it)
    fifo: str = "false"  # "true": at most one in-flight record per key, in order
    max_in_flight: int = 1_000  # acquired records per partition per group, at most
    dead_letter_topic: str = ""  # "" means "<topic>.dlq"

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    @classmethod
    def from_settings(cls, partitions: int, replication_factor: int, settings: dict[str, str]) -> TopicConfig:
        """Build a config from string settings such as {"retention.ms": "60000"}.

        Raises InvalidConfigError naming the first bad setting.
        """
        if not isinstance(partitions, int) or partitions < 1 or partitions > 10_000:
            from tideway.protocol.errors import InvalidPartitionsError

            raise InvalidPartitionsError(f"partitions must be 1..10000, got {partitions!r}")
        values: dict[str, int | str] = {}
        for name, raw in settings.items():
            field = _SETTING_FIELDS.get(name)
            if field is None:
                known = ", ".join(sorted(_SETTING_FIELDS))
                raise InvalidConfigError(f"unknown topic setting {name!r}; known settings: {known}")
            values[field] = _parse_setting(name, field, str(raw))
        config = cls(partitions=partitions, replication_factor=replication_factor, **values)
        config.check()
        return config

    def check(self) -> None:
        """Raise InvalidConfigError if a value is out of range."""
        if self.segment_bytes < 1024:
            raise InvalidConfigError("segment.bytes must be at least 1024")
        if self.segment_ms < 1:
            raise InvalidConfigError("segment.ms must be positive")
        if self.max_message_bytes < 64 or self.max_message_bytes > 64 << 20:
            raise InvalidConfigError("max.message.bytes must be 64 .. 67108864")
        if self.retention_ms < -1 or self.retention_bytes < -1:
            raise InvalidConfigError("retention.ms and retention.bytes must be -1 or positive")
        if self.flush_interval_ms < -1:
            raise InvalidConfigError("flush must be always, none or a positive number of ms")
        if self.index_interval_bytes < 1:
            raise InvalidConfigError("index.interval.bytes must be positive")
        if self.min_insync_replicas < 1:
            raise InvalidConfigError("min.insync.replicas must be at least 1")
        if not 1_000 <= self.visibility_timeout_ms <= MAX_VISIBILITY_TIMEOUT_MS:
            raise InvalidConfigError("queue.visibility.timeout.ms must be 1000 .. 43200000 (12 h)")
        if not 1 <= self.max_deliveries <= 1_000:
            raise InvalidConfigError("queue.max.deliveries must be 1 .. 1000")
        if self.retry_backoff_ms < 0 or self.retry_backoff_max_ms < self.retry_backoff_ms:
            raise InvalidConfigError("queue.retry.backoff.ms must be >= 0 and <= queue.retry.backoff.max.ms")
        if not 0 <= self.delivery_delay_ms <= MAX_VISIBILITY_TIMEOUT_MS:
            raise InvalidConfigError("queue.delivery.delay.ms must be 0 .. 43200000 (12 h)")
        if not 1 <= self.max_in_flight <= 100_000:
            raise InvalidConfigError("queue.max.inflight must be 1 .. 100000")
        if self.dead_letter_topic:
            validate_topic_name(self.dead_letter_topic)

    @property
    def is_fifo(self) -> bool:
        return self.fifo == "true"

    def dead_letter_topic_for(self, topic: str) -> str:
        return self.dead_letter_topic or f"{topic}.dlq"

    def to_settings(self) -> dict[str, str]:
        """The inverse of ``from_settings`` (for describe)."""
        out = {}
        for name, field in _SETTING_FIELDS.items():
            value = getattr(self, field)
            if name == "flush":
                out[name] = {0: "always", -1: "none"}.get(value, str(value))
            else:
                out[name] = str(value)
        return out

    @property
    def flush_policy(self) -> str:
        return {0: "always", -1: "none"}.get(self.flush_interval_ms, f"{self.flush_interval_ms}ms")


_SETTING_FIELDS = {
    "flush": "flush_interval_ms",
    "retention.ms": "retention_ms",
    "retention.bytes": "retention_bytes",
    "segment.bytes": "segment_bytes",
    "segment.ms": "segment_ms",
    "max.message.bytes": "max_message_bytes",
    "index.interval.bytes": "index_interval_bytes",
    "min.insync.replicas": "min_insync_replicas",
    "cleanup.policy": "cleanup_policy",
    "delete.retention.ms": "delete_retention_ms",
    "queue.visibility.timeout.ms": "visibility_timeout_ms",
    "queue.max.deliveries": "max_deliveries",
    "queue.retry.backoff.ms": "retry_backoff_ms",
    "queue.retry.backoff.max.ms": "retry_backoff_max_ms",
    "queue.delivery.delay.ms": "delivery_delay_ms",
    "queue.fifo": "fifo",
    "queue.max.inflight": "max_in_flight",
    "queue.dead.letter.topic": "dead_letter_topic",
}


def altered_settings(settings: dict[str, str], new: dict[str, str], removed: list[str]) -> dict[str, str]:
    """``settings`` with ``new`` applied and ``removed`` back to their defaults (validated by the caller)."""
    unknown = [name for name in removed if name not in _SETTING_FIELDS]
    if unknown:
        raise InvalidConfigError(f"unknown topic settings {unknown}")
    out = {name: value for name, value in settings.items() if name not in removed}
    out.update(new)
    return out


def _parse_setting(name: str, field: str, raw: str) -> int | str:
    if field == "cleanup_policy":
        policy = ",".join(sorted(part.strip().lower() for part in raw.split(",") if part.strip()))
        if policy not in ("compact", "delete", "compact,delete"):
            raise InvalidConfigError(f"cleanup.policy must be delete, compact or compact,delete; got {raw!r}")
        return policy
    if field == "fifo":
        lowered = raw.strip().lower()
        if lowered not in ("true", "false"):
            raise InvalidConfigError(f"queue.fifo must be true or false, got {raw!r}")
        return lowered
    if field == "dead_letter_topic":
        return raw.strip()
    if field == "flush_interval_ms":
        lowered = raw.strip().lower()
        if lowered == "always":
            return 0
        if lowered == "none":
            return -1
        raw = lowered.removesuffix("ms")
    try:
        value = int(raw)
    except ValueError:
        raise InvalidConfigError(f"topic setting {name} must be a whole number, got {raw!r}") from None
    if field == "flush_interval_ms" and value < 1:
        raise InvalidConfigError("flush must be always, none or a positive number of ms")
    return value
