"""How the Kafka listener builds its answers: kio's dataclasses filled by field name, Tideway's error numbers in
Kafka's vocabulary, and the values Kafka's answers use for "none".

Each Kafka version has its own dataclass with its own fields; ``build`` fills the fields a version has from one
set of values, so one handler answers every version.
"""

from __future__ import annotations

import datetime
import uuid

from kio.schema.errors import ErrorCode

from tideway.protocol import errors

__all__ = ["CLUSTER_ID", "NO_THROTTLE", "OPERATIONS_UNKNOWN", "UNKNOWN_TOPIC_ID", "build", "item_type", "kafka_code",
           "milliseconds"]

CLUSTER_ID = "tideway"
NO_THROTTLE = datetime.timedelta(0)
UNKNOWN_TOPIC_ID = uuid.UUID(int=0)
OPERATIONS_UNKNOWN = -(1 << 31)  # Kafka's INT32_MIN: authorized operations not asked for

# Tideway's own error numbers (1000 and up) in Kafka's vocabulary; the rest are Kafka's numbers already.
_KAFKA_CODE = {errors.BrokerBusyError.errno: errors.RequestTimedOutError.errno,
               errors.AuthenticationUnavailableError.errno: errors.SaslAuthenticationFailedError.errno}


def kafka_code(errno: int) -> ErrorCode:
    code = _KAFKA_CODE.get(errno, errno)
    try:
        return ErrorCode(code)
    except ValueError:
        return ErrorCode.unknown_server_error


def build(cls, **values):
    """An instance of ``cls`` (one API version's dataclass) from the values its fields take; others are dropped."""
    fields = cls.__dataclass_fields__
    return cls(**{name: value for name, value in values.items() if name in fields})


def item_type(cls, name: str):
    """The dataclass of the items of ``cls``'s sequence field ``name`` (nullable or not)."""
    sequence = cls.__dataclass_fields__[name].type
    if type(None) in getattr(sequence, "__args__", ()):  # tuple[X, ...] | None
        sequence = next(arg for arg in sequence.__args__ if arg is not type(None))
    return sequence.__args__[0]


def milliseconds(value) -> int:
    return int(value.total_seconds() * 1000) if isinstance(value, datetime.timedelta) else int(value)
