"""Record headers with a meaning to the queue model."""

DEADLINE_HEADER = "tideway-deliver-at"  # deliver at (ms since the epoch, ASCII digits)
# A marker in a dead-letter partition: the dead letter at the offset in its value (ASCII digits)
# was redriven on its own (a selected redrive), so lists and later redrives skip it.
REDRIVEN_HEADER = "tideway-dlq-redriven"
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
