"""The message browser's search: from the latest messages, an offset or a time, filtered on the server.

Filters (key contains, value contains, a header, a JSON path) are evaluated here, over at most
``SCAN_BUDGET`` records, reading through the gateway's pooled client, so a
search over a large queue is bounded and says how far it got. The reads are the
platform's looks (not metered as the tenant's messages out, nor billed); the
plan's consume rate limit still counts them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from tideway_server.gateway import limits, pool, schemas
from tideway_server.gateway.auth import Caller
from tideway_server.gateway.catalog import QueueInfo

from tideway.protocol.messages import EARLIEST_TIMESTAMP, INSPECTOR, LATEST_TIMESTAMP

SCAN_BUDGET = 20_000
READ_BATCH = 500
SHOWN_BYTES = 2_000


@dataclass
class Search:
    mode: str = "latest"  # latest | offset | time
    partition: int | None = None
    offset: int = 0
    timestamp_ms: int = 0
    count: int = 50
    key: str = ""
    text: str = ""
    json_path: str = ""  # "a.b.0.c" (the field exists) or "a.b=value" (it equals the value), on the decoded value
    header: str = ""  # "name" (the record has that header) or "name=value" (one with that value)

    @property
    def filtered(self) -> bool:
        return bool(self.key or self.text or self.json_path or self.header)


def _header_matches(headers, expression: str) -> bool:
    name, sep, expected = expression.partition("=")
    name, expected = name.strip(), expected.strip()
    for header, value in headers or ():
        if header == name and (not sep or (value or b"").decode(errors="replace") == expected):
            return True
    return False


def _path_parts(expression: str) -> tuple[list[str], str | None]:
    """'$.customer.id = 42' -> (['customer', 'id'], '42'); without '=', None (the field must exist)."""
    path, sep, expected = expression.partition("=")
    parts = [p for p in path.strip().removeprefix("$").strip(".").split(".") if p]
    return parts, expected.strip() if sep else None


def _at_path(data, parts: list[str]):
    for part in parts:
        if isinstance(data, dict) and part in data:
            data = data[part]
        elif isinstance(data, list) and part.isdigit() and int(part) < len(data):
            data = data[int(part)]
        else:
            raise KeyError(part)
    return data


def _json_matches(decoded, expression: str) -> bool:
    parts, expected = _path_parts(expression)
    try:
        found = _at_path(decoded, parts)
    except KeyError:
        return False
    if expected is None:
        return True
    try:
        return found == json.loads(expected)  # 42, "x", true, null
    except ValueError:
        return str(found) == expected  # a bare word: compared as text


@dataclass
class Found:
    messages: list[dict] = field(default_factory=list)
    scanned: int = 0
    exhausted: bool = False  # the scan budget ran out before the search did


def shown(data: bytes | None) -> tuple[str, bool]:
    """(text to show, whether it is hex because the bytes are not UTF-8)."""
    if data is None:
        return "", False
    try:
        return data[:SHOWN_BYTES].decode(), False
    except UnicodeDecodeError:
        return data[:SHOWN_BYTES // 2].hex(" "), True


def _matches(search: Search, record, decoded) -> bool:
    if search.key and search.key.encode() not in (record.key or b""):
        return False
    if search.text and search.text.encode() not in (record.value or b""):
        return False
    if search.header and not _header_matches(record.headers, search.header):
        return False
    if search.json_path and (decoded is None or not _json_matches(decoded[0], search.json_path)):
        return False
    return True


async def find(caller: Caller, queue: QueueInfo, search: Search, progress=None) -> Found:
    """The messages the search selects; ``progress(scanned)`` is told after every read (the page shows it)."""
    client = await pool.client(queue.bootstrap)
    subject = await schemas.subject_schemas(queue)
    numbers = [search.partition] if search.partition is not None else list(range(queue.partitions))
    ranges = {}
    older_left = False  # a "latest" search with filters looks at the newest SCAN_BUDGET records only
    for number in numbers:
        earliest, _ = await client.list_offset(queue.broker_topic, number, EARLIEST_TIMESTAMP)
        latest, _ = await client.list_offset(queue.broker_topic, number, LATEST_TIMESTAMP)
        if search.mode == "offset":
            start = min(max(search.offset, earliest), latest)
        elif search.mode == "time":
            at, _ = await client.list_offset(queue.broker_topic, number, search.timestamp_ms)
            start = at if at >= 0 else latest
        else:  # the latest: enough of each partition's tail to fill the page (or the budget, when filtering)
            back = SCAN_BUDGET // len(numbers) if search.filtered else search.count
            start = max(earliest, latest - back)
            older_left = older_left or (search.filtered and start > earliest)
        ranges[number] = (start, latest)
    found = Found(exhausted=older_left)
    consumed = 0
    for number, (position, end) in ranges.items():
        while position < end and found.scanned < SCAN_BUDGET:
            if search.mode != "latest" and len(found.messages) >= search.count:
                break
            # Read as the platform looking (INSPECTOR), not as a consumer: browsing is not the tenant's egress
            # and is not billed (issue 43); the plan's consume rate still applies (below).
            records, next_offset, _ = await pool.read_partition(queue.bootstrap, queue.broker_topic, number, position,
                                                                max_records=min(READ_BATCH, end - position), wait_ms=0,
                                                                replica_id=INSPECTOR)
            if not records:
                break
            for record in records:
                found.scanned += 1
                consumed += len(record.value or b"") + len(record.key or b"")
                decoded = schemas.decode(queue, subject, record.value) if search.json_path else None
                if _matches(search, record, decoded):
                    if not search.json_path:
                        decoded = schemas.decode(queue, subject, record.value)
                    found.messages.append(_row(number, record, decoded))
            position = next_offset
            if progress is not None:
                progress(found.scanned)
        if position < end and found.scanned >= SCAN_BUDGET:
            found.exhausted = True
    await limits.charge_consumed(caller, consumed)
    if search.mode == "latest":
        found.messages.sort(key=lambda m: (m["timestamp"], m["partition"], m["offset"]))
        found.messages = found.messages[-search.count:][::-1]  # newest first
    else:
        found.messages = found.messages[: search.count]
    return found


def _row(partition: int, record, decoded) -> dict:
    key, key_hex = shown(record.key)
    value, value_hex = shown(record.value)
    headers = {name: (v or b"").decode(errors="replace") for name, v in record.headers or []}
    row = {"partition": partition, "offset": record.offset, "timestamp": record.timestamp_ms, "key": key,
           "key_hex": key_hex, "value": value, "value_hex": value_hex, "headers": headers}
    if decoded is not None and decoded[1] != "JSON":  # schema-encoded: show the data, not the wire bytes
        row["decoded"] = json.dumps(decoded[0], indent=1, default=str)[:SHOWN_BYTES]
        row["decoded_as"] = decoded[1]
    return row
