"""Kafka v2 RecordBatch codec: the format records travel and rest in."""

from tideway.record.batch import (
    BATCH_HEADER_BYTES,
    BatchBuilder,
    BatchHeader,
    Record,
    decode_records,
    iter_batches,
    read_header,
    validate_batches,
)
from tideway.record.compression import Compression

__all__ = [
    "BATCH_HEADER_BYTES",
    "BatchBuilder",
    "BatchHeader",
    "Compression",
    "Record",
    "decode_records",
    "iter_batches",
    "read_header",
    "validate_batches",
]
