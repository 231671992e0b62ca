"""The MD5 digests SQS returns so that clients can check what they sent and received (AWS's published rules).

``MD5OfMessageBody``: the MD5 of the body's UTF-8 bytes. ``MD5OfMessageAttributes``: the MD5 of the attributes
sorted by name, each as its name, its data type (each a 4-byte big-endian length and the UTF-8 bytes), a transport
byte (1 for String and Number types, 2 for Binary), then its value (a length and the UTF-8 or raw bytes). The AWS
JavaScript SDK checks both on every send and receive; boto3 does not.
"""

from __future__ import annotations

import base64
import hashlib


def md5_of_body(body: str) -> str:
    return hashlib.md5(body.encode(), usedforsecurity=False).hexdigest()


def md5_of_attributes(attributes: dict[str, dict]) -> str | None:
    """``attributes``: {name: {"DataType", "StringValue" | "BinaryValue" (base64)}}; None when there are none."""
    if not attributes:
        return None
    digest = hashlib.md5(usedforsecurity=False)
    for name in sorted(attributes):
        value = attributes[name]
        data_type = value["DataType"]
        digest.update(_sized(name.encode()))
        digest.update(_sized(data_type.encode()))
        if data_type.split(".", 1)[0] == "Binary":
            digest.update(b"\x02")
            digest.update(_sized(base64.b64decode(value["BinaryValue"])))
        else:
            digest.update(b"\x01")
            digest.update(_sized(value["StringValue"].encode()))
    return digest.hexdigest()


def _sized(data: bytes) -> bytes:
    return len(data).to_bytes(4, "big") + data
