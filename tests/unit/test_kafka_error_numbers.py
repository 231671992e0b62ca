"""Tideway's wire error codes below 1000 are Kafka's (tideway/protocol/errors.py promises it, and the Kafka listener
passes them to Kafka clients as they are): each means what Kafka's error of that number means, by name, checked
against Kafka's own list as kio generates it."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from tideway.protocol import errors

# Same meaning, a name of Tideway's: Kafka's CLUSTER_AUTHORIZATION_FAILED is what AUTHORIZATION_FAILED answers.
SAME_MEANING = {31: "AUTHORIZATION_FAILED"}
# Tideway's own use of a number Kafka gives another error (only on the native protocol: the KIP-848 commit of a
# partition the member does not own, which Kafka's clients never send to Tideway).
NATIVE_ONLY = {111}


def test_every_error_below_1000_is_kafkas_error_of_that_number():
    wrong = {}
    for number, cls in errors.ERRORS_BY_CODE.items():
        if number >= 1000 or number in NATIVE_ONLY:
            continue
        kafka_name = ErrorCode(number).name.upper()
        if cls.name != kafka_name and SAME_MEANING.get(number) != cls.name:
            wrong[cls.__name__] = (number, cls.name, f"Kafka's {number} is {kafka_name}")
    assert not wrong, wrong
