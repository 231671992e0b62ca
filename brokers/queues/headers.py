"""Record headers with a meaning to the queue model."""

DEADLINE_HEADER = "tideway-deliver-at"  # deliver at (ms since the epoch, ASCII digits)
DLQ_HEADERS = (
    "tideway-dlq-origin-topic",
    "tideway-dlq-origin-partition",
    "tideway-dlq-origin-offset",
    "tideway-dlq-group",
    "tideway-dlq-delivery-count",
    "tideway-dlq-last-error",
    "tideway-dlq-first-delivery-ms",
    "tideway-dlq-last-delivery-ms",
)
