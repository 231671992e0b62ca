from rest_framework import serializers
from tideway_server.topics.choices import QueueMode, SchemaEncoding
from tideway_server.topics.models import Queue

from tideway.protocol.names import split_tenant_prefix

HOUR_MS = 3600 * 1000
NAME = r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,99}$"
NAME_RULE = "1 to 100 letters, digits, '.', '_' or '-', not starting with '.'"


def _between(low: str, high: str) -> dict:
    """A bounded number's messages in words ("at least 1 minute"), for people on the console and the API alike."""
    return {"min_value": f"at least {low}", "max_value": f"at most {high}",
            "invalid": "a whole number", "max_string_length": "a whole number"}


def validate_name(value: str) -> str:
    if value.endswith(".dlq"):
        raise serializers.ValidationError("names ending in '.dlq' are reserved for dead-letter queues")
    if split_tenant_prefix(value)[0]:
        raise serializers.ValidationError("names of the form 't<digits>.<name>' are reserved (they are broker-side names)")
    return value


class QueueSerializer(serializers.ModelSerializer):
    """A queue or topic. On update, only the settings that may change are taken (partitions only grow)."""

    name = serializers.RegexField(NAME, max_length=100, validators=[validate_name],
                                  error_messages={"invalid": f"use {NAME_RULE}", "max_length": f"use {NAME_RULE}"},
                                  help_text="1-100 letters, digits, '.', '_' or '-'; unique in the tenant")
    mode = serializers.ChoiceField(QueueMode.choices, default=QueueMode.QUEUE)
    partitions = serializers.IntegerField(min_value=1, max_value=1000, required=False,
                                          error_messages=_between("1 partition", "1,000 partitions"))
    replication_factor = serializers.IntegerField(min_value=1, max_value=5, required=False,
                                                  error_messages=_between("1 replica", "5 replicas"),
                                                  help_text="default: 3, or fewer when the cluster has fewer brokers")
    retention_ms = serializers.IntegerField(min_value=60_000, max_value=10 * 365 * 24 * HOUR_MS, required=False,
                                            error_messages=_between("1 minute (60,000 ms)",
                                                                    "10 years (315,360,000,000 ms)"),
                                            help_text="default: 7 days, capped by the plan")
    retention_bytes = serializers.IntegerField(min_value=1 << 20, max_value=1 << 50, required=False,
                                               error_messages=_between("1 MiB (1,048,576 bytes)", "1 PiB"),
                                               help_text="per partition; default: the plan's storage divided by its partitions")
    compaction = serializers.BooleanField(required=False)
    max_message_bytes = serializers.IntegerField(min_value=1024, max_value=64 << 20, required=False,
                                                 error_messages=_between("1 KiB (1,024 bytes)", "64 MiB"))
    visibility_timeout_ms = serializers.IntegerField(min_value=1_000, max_value=12 * HOUR_MS, required=False,
                                                     error_messages=_between("1 second (1,000 ms)",
                                                                             "12 hours (43,200,000 ms)"))
    max_deliveries = serializers.IntegerField(min_value=1, max_value=1_000, required=False,
                                              error_messages=_between("1 delivery", "1,000 deliveries"))
    delivery_delay_ms = serializers.IntegerField(min_value=0, max_value=12 * HOUR_MS, required=False,
                                                 error_messages=_between("0 ms", "12 hours (43,200,000 ms)"))
    fifo = serializers.BooleanField(required=False)
    schema_subject = serializers.CharField(max_length=255, required=False, allow_blank=True)
    schema_encoding = serializers.ChoiceField(SchemaEncoding.choices, required=False)
    cluster = serializers.SlugRelatedField(slug_field="name", read_only=True)
    dead_letter_queue = serializers.SerializerMethodField()

    class Meta:
        model = Queue
        fields = ["name", "mode", "status", "partitions", "replication_factor", "retention_ms", "retention_bytes",
                  "compaction", "max_message_bytes", "visibility_timeout_ms", "max_deliveries", "delivery_delay_ms",
                  "fifo", "dead_letter_queue", "schema_subject", "schema_encoding", "cluster", "created", "updated"]
        read_only_fields = ["status", "created", "updated"]

    def get_dead_letter_queue(self, queue: Queue) -> str | None:
        return f"{queue.name}.dlq" if queue.mode == QueueMode.QUEUE else None


class QueueUpdateSerializer(QueueSerializer):
    name = serializers.RegexField(NAME, max_length=100, required=False)
    mode = serializers.ChoiceField(QueueMode.choices, required=False)
