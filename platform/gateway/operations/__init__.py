"""The data operations of a queue, with their validation: one implementation for every way in.

The REST views (``views/``), the WebSocket consumer (``consumers.py``) and the
web console (``webui``) all call these functions with a ``Caller`` (who, with
which scopes) and a ``QueueInfo`` (which queue); none of them checks a bound
or builds a broker-side name on its own. Publishing lives in
``publishing.py`` (with its dedup and schema checks) and is used the same way.
Refusals raise ``GatewayError``; broker errors are translated by
``broker_failure``.

The console's reads of broker data are operations too, in this package's modules: ``browse`` (the message
search), ``groups`` (every group's lag, a reset of an idle group), ``traffic`` (traffic counters, throttling)
and ``members`` (a console member as a ``Caller``, the member's queues). The console reaches the brokers, the
gateway's pool and its Redis only through them (tests/unit/test_import_rules.py).
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid

from asgiref.sync import sync_to_async
from tideway_server.gateway import limits, pool
from tideway_server.gateway.auth import Caller
from tideway_server.gateway.catalog import QueueInfo
from tideway_server.gateway.errors import GatewayError, invalid
from tideway_server.gateway.wire import add_body, message_json

from tideway.native.group import commit_offsets, describe_group, timestamp_at
from tideway.native.queue import (
    count_dead_letters,
    list_dead_letters,
    parse_receipt,
    purge_dead_letters,
)
from tideway.protocol import errors as broker_errors
from tideway.protocol.messages import EARLIEST_TIMESTAMP, INSPECTOR, LATEST_TIMESTAMP
from tideway.protocol.names import TenantNames

NAME = r"[A-Za-z0-9._-]{1,100}"
_GROUP = re.compile(rf"^{NAME}$")
MAX_WAIT_SECONDS = 20
MAX_RECEIVE = 1000
MAX_LOCK_SECONDS = 12 * 3600
MIN_LOCK_SECONDS = 0.001  # locks are kept in whole milliseconds

REDRIVE_JOB_MEMORY_S = 24 * 3600

# What a settled call answers: {"acked": 3}, {"released": 3}, {"rejected": 3}.
SETTLED = {"ack": "acked", "nack": "released", "reject": "rejected"}


# -- names and errors ---------------------------------------------------------------------------


def broker_group(caller: Caller, group: str, kind: str) -> str:
    """The broker-side group id (``kind``: "queue" or "stream"): tenants never share a group, nor do queue (share)
    and stream groups. The same name a tenant's native client gets for its group (tideway.protocol.names), so a
    group is one group whichever way it is used, and its dead letters name it by the tenant's own name."""
    if not _GROUP.match(group):
        raise invalid(f"group name {group!r} must be 1-100 letters, digits, '.', '_' or '-'")
    return TenantNames(caller.tenant_id).group(group, kind)


def broker_failure(exc: broker_errors.TidewayError) -> GatewayError:
    """A broker's refusal in the API's vocabulary (docs/api.md, "Errors")."""
    if isinstance(exc, broker_errors.InvalidRecordStateError):
        return GatewayError("receipt_expired", f"the receipt no longer holds the message (its visibility timeout passed, "
                            f"or it was acked): {exc.message}")
    if isinstance(exc, broker_errors.OffsetOutOfRangeError):
        return GatewayError("offset_out_of_range", exc.message)
    if isinstance(exc, (broker_errors.InvalidRequestError, broker_errors.NotAssignedError, broker_errors.UnknownMemberIdError,
                        broker_errors.FencedMemberEpochError, broker_errors.InvalidConfigError)):
        return GatewayError("invalid_request", exc.message)
    if isinstance(exc, broker_errors.MessageTooLargeError):
        return GatewayError("message_too_large", exc.message)
    return GatewayError("unavailable", f"the queue's brokers could not answer: {exc}; retry", retry_after_ms=1000)


def require_scope(caller: Caller, scope: str) -> None:
    if scope not in caller.principal.scopes:
        raise GatewayError("forbidden", f"this API key lacks the '{scope}' scope")


def require_queue_mode(queue: QueueInfo) -> None:
    if not queue.is_queue:
        raise GatewayError("wrong_mode", f"{queue.name!r} is a stream: read it by partition and offset, or with a consumer group")


def check_lock_seconds(value: float | None, name: str = "visibility_timeout") -> None:
    """A lock length (visibility timeout, extension): 1 ms to 12 h, or None for the queue's own."""
    if value is not None and not MIN_LOCK_SECONDS <= value <= MAX_LOCK_SECONDS:
        raise invalid(f"{name} must be {MIN_LOCK_SECONDS} (1 ms) to {MAX_LOCK_SECONDS} seconds")


# -- the queue model ------------------------------------------------------------------------------


def delivery_json(message, base64_always: bool = False) -> dict:
    """A delivery as the API shows it (``message_json`` plus receipt, delivery count and lock deadline)."""
    out: dict = {"partition": message.partition, "offset": message.offset, "timestamp": message.timestamp_ms}
    add_body(out, message.key, message.value, message.headers, base64_always)
    out["receipt"] = message.receipt
    out["delivery_count"] = message.delivery_count
    out["visible_at"] = message.lock_deadline_ms
    return out


async def queue_consumer(caller: Caller, queue: QueueInfo, group: str):
    """The pooled queue consumer of ``group`` on ``queue`` (a queue-mode queue)."""
    require_queue_mode(queue)
    return await pool.queue_consumer(queue.bootstrap, broker_group(caller, group, "queue"), queue.broker_topic)


def checked_receipts(receipts: list[str]) -> list[tuple[int, int, int]]:
    """The receipts, parsed (the broker client takes them so)."""
    if not receipts:
        raise invalid("receipts is empty")
    if len(receipts) > MAX_RECEIVE:
        raise invalid(f"at most {MAX_RECEIVE} receipts per call")
    parsed = []
    for receipt in receipts:
        try:
            parsed.append(parse_receipt(receipt))
        except broker_errors.TidewayError:
            raise invalid(f"receipt {receipt!r} is not one this queue gave (partition:offset:delivery)") from None
    return parsed


async def receive(caller: Caller, queue: QueueInfo, group: str, *, max_messages: int, wait_seconds: float,
                  visibility_timeout: float | None):
    """Lock and return up to ``max_messages`` (waiting up to ``wait_seconds`` for some)."""
    if not 1 <= max_messages <= MAX_RECEIVE:
        raise invalid(f"max_messages must be 1 to {MAX_RECEIVE}")
    if not 0 <= wait_seconds <= MAX_WAIT_SECONDS:
        raise invalid(f"wait_seconds must be 0 to {MAX_WAIT_SECONDS}")
    check_lock_seconds(visibility_timeout)
    consumer = await queue_consumer(caller, queue, group)
    lock_ms = int(visibility_timeout * 1000) if visibility_timeout is not None else 0
    messages = await consumer.receive(max_messages, wait_ms=int(wait_seconds * 1000), lock_ms=lock_ms)
    await limits.charge_consumed(caller, sum(len(m.value or b"") + len(m.key or b"") for m in messages))
    return messages


def settlement(consumer, action: str, request, *, ack_linger_ms: float | None = None):
    """Check an ack, nack, reject or extend and return the brokers' call for it (not yet awaited).

    ``request`` is a REST body or a WebSocket frame: ``receipts``, and ``delay_seconds`` (nack: redeliver
    after this long, default the queue's backoff), ``seconds`` (extend: hold the locks this much longer
    from now) and ``error`` (nack and reject: kept in the dead-letter headers). ``ack_linger_ms``: how long
    an ack may wait to share a request with others (default the consumer's, ``pool.ACK_LINGER_MS``).
    """
    receipts = checked_receipts(request.receipts)
    if action == "ack":
        return consumer.ack(receipts, linger_ms=ack_linger_ms)
    if action == "nack":
        if request.delay_seconds is not None and not 0 <= request.delay_seconds <= MAX_LOCK_SECONDS:
            raise invalid(f"delay_seconds must be 0 to {MAX_LOCK_SECONDS}")
        delay_ms = None if request.delay_seconds is None else int(request.delay_seconds * 1000)
        return consumer.nack(receipts, delay_ms=delay_ms, error=request.error)
    if action == "reject":
        return consumer.reject(receipts, error=request.error)
    if request.seconds is None:
        raise invalid(f"seconds must be {MIN_LOCK_SECONDS} (1 ms) to {MAX_LOCK_SECONDS}")
    check_lock_seconds(request.seconds, "seconds")
    return consumer.extend(receipts, int(request.seconds * 1000))


# -- reading without consuming ---------------------------------------------------------------------


async def peek(caller: Caller, queue: QueueInfo, *, max_messages: int, partition: int | None = None,
               offset: int | None = None, base64_always: bool = False) -> list[dict]:
    """Messages as stored, without consuming or locking them: from ``offset`` (default: each partition's start)."""
    out, consumed = [], 0
    broker_client = await pool.client(queue.bootstrap)
    for number in [partition] if partition is not None else range(queue.partitions):
        if len(out) >= max_messages:
            break
        start = offset
        if start is None:
            start, _ = await broker_client.list_offset(queue.broker_topic, number, EARLIEST_TIMESTAMP)
        records, _next, _hw = await pool.read_partition(queue.bootstrap, queue.broker_topic, number, start,
                                                        max_records=max_messages - len(out), wait_ms=0)
        out += [message_json(partition=number, offset=r.offset, timestamp_ms=r.timestamp_ms, key=r.key, value=r.value,
                             headers=r.headers, base64_always=base64_always) for r in records]
        consumed += sum(len(r.value or b"") + len(r.key or b"") for r in records)
    await limits.charge_consumed(caller, consumed)
    return out


# -- dead letters ---------------------------------------------------------------------------------


async def dead_letters(caller: Caller, queue: QueueInfo, *, limit: int, base64_always: bool = False) -> list[dict]:
    """Dead letters not redriven yet, oldest first, as the API shows them (headers say where they came from)."""
    require_queue_mode(queue)
    letters = await list_dead_letters(await pool.client(queue.bootstrap), queue.dead_letter_topic, limit=limit)
    return [message_json(partition=d["partition"], offset=d["offset"], timestamp_ms=d["timestamp_ms"], key=d["key"],
                         value=d["value"], headers=[(k, v.encode()) for k, v in d["headers"].items()],
                         base64_always=base64_always) for d in letters]


async def dead_letter_count(caller: Caller, queue: QueueInfo) -> tuple[int, bool]:
    """How many dead letters wait (exact up to 1,000; beyond, an upper bound: the flag says which)."""
    require_queue_mode(queue)
    return await count_dead_letters(await pool.client(queue.bootstrap), queue.dead_letter_topic)


async def purge(caller: Caller, queue: QueueInfo) -> int:
    require_queue_mode(queue)
    return await purge_dead_letters(await pool.client(queue.bootstrap), queue.dead_letter_topic)


# -- purge ----------------------------------------------------------------------------------------------


async def purge_queue(caller: Caller, queue: QueueInfo) -> dict:
    """Delete every message the queue holds now, on every partition (DELETE_RECORDS up to each high watermark;
    what is published meanwhile stays). Queue groups drop what they had read of them, in flight or not; stream
    groups' positions stay (a position below the new start reads from it). How many went, per partition too."""
    require_scope(caller, "manage")
    client = await pool.client(queue.bootstrap)
    topic, numbers = queue.broker_topic, range(queue.partitions)
    before = await client.list_offsets([(topic, number, EARLIEST_TIMESTAMP) for number in numbers])
    starts = await asyncio.gather(*(client.delete_records(topic, number) for number in numbers))
    partitions = [{"partition": number, "log_start_offset": start,
                   "purged": max(0, start - before.get((topic, number), (start, -1))[0])}
                  for number, start in zip(numbers, starts, strict=True)]
    return {"purged": sum(p["purged"] for p in partitions), "partitions": partitions}


async def queue_extent(queue: QueueInfo) -> list[tuple[int, int]]:
    """(first offset, log end) of each partition of the queue."""
    client = await pool.client(queue.bootstrap)
    topic, numbers = queue.broker_topic, range(queue.partitions)
    starts = await client.list_offsets([(topic, number, EARLIEST_TIMESTAMP) for number in numbers])
    ends = await client.list_offsets([(topic, number, LATEST_TIMESTAMP) for number in numbers])
    return [(starts[(topic, n)][0], ends[(topic, n)][0]) for n in numbers]


async def redrive_job_exists(queue_id: int, job_id: str) -> bool:
    """Whether ``job_id`` is a redrive of this queue (its key outlives the job for REDRIVE_JOB_MEMORY_S)."""
    return bool(await limits.connection().exists(redrive_job_key(queue_id, job_id)))


def redrive_job_key(queue_id: int, job_id: str) -> str:
    return f"tw:redrive:{queue_id}:{job_id}"


async def start_redrive(caller: Caller, queue: QueueInfo, *, rate_per_s: float, limit: int | None,
                        selected: list[tuple[int, int]] | None) -> str:
    """Start moving dead letters back (a Celery job, at ``rate_per_s``): all (the oldest ``limit``) or the
    ``selected`` (partition, offset) ones. Returns the job id."""
    require_queue_mode(queue)
    if not 0 < rate_per_s <= 100_000:
        raise invalid("rate_per_s must be more than 0 and at most 100000")
    if limit is not None and limit < 1:
        raise invalid("limit must be 1 or more (or null for all)")
    if selected is not None and not 0 < len(selected) <= 1000:
        raise invalid("messages selects 1 to 1000 dead letters (or leave it out for all)")
    for partition, _offset in selected or ():
        # The dead-letter topic has as many partitions as the queue.
        if not 0 <= partition < queue.partitions:
            raise invalid(f"dead letters are in partitions 0..{queue.partitions - 1}; there is no partition {partition}",
                          partition=partition)
    from tideway_server.gateway.tasks import redrive_dead_letters

    job_id = uuid.uuid4().hex
    await limits.connection().set(redrive_job_key(queue.id, job_id), 1, ex=REDRIVE_JOB_MEMORY_S)
    chosen = None if selected is None else [[p, o] for p, o in selected]
    await sync_to_async(redrive_dead_letters.apply_async)((queue.id, rate_per_s, limit, chosen), task_id=job_id)
    return job_id


# -- stream positions ----------------------------------------------------------------------------


def partition_number(queue: QueueInfo, partition: int) -> int:
    if not 0 <= partition < queue.partitions:
        raise GatewayError("not_found", f"queue {queue.name!r} has no partition {partition} (it has {queue.partitions})")
    return partition


async def offset_at(queue: QueueInfo, partition: int, where: str | int) -> int:
    """An offset from "earliest", "latest" or a timestamp (ms); for a timestamp past the end, the end."""
    broker_client = await pool.client(queue.bootstrap)
    stamp = {"earliest": EARLIEST_TIMESTAMP, "latest": LATEST_TIMESTAMP}.get(where, where)
    offset, _ = await broker_client.list_offset(queue.broker_topic, partition, stamp)
    if offset < 0:
        offset, _ = await broker_client.list_offset(queue.broker_topic, partition, LATEST_TIMESTAMP)
    return offset


async def stream_link(caller: Caller, queue: QueueInfo, group: str):
    return await pool.coordinator(queue.bootstrap, broker_group(caller, group, "stream"))


async def commit(caller: Caller, queue: QueueInfo, group: str, offsets: dict[int, int], member_id: str = "",
                 member_epoch: int = -1) -> None:
    """Commit positions of a stream group: each an offset of the log or its end, nothing past it."""
    for partition, offset in sorted(offsets.items()):
        latest = await offset_at(queue, partition, "latest")
        if offset > latest:
            raise GatewayError("offset_out_of_range", f"offset {offset} is past the end of partition {partition} "
                               f"(its next offset is {latest})",
                               details={"partition": partition, "offset": offset, "latest": latest})
    topic = queue.broker_topic
    await commit_offsets(await stream_link(caller, queue, group), {(topic, p): o for p, o in sorted(offsets.items())},
                         member_id=member_id, member_epoch=member_epoch)


async def seek(caller: Caller, queue: QueueInfo, group: str, *, to: str | None = None, offset: int | None = None,
               timestamp_ms: int | None = None, partitions: list[int] | None = None,
               dry_run: bool = False) -> dict[int, int]:
    """Move a stream group to "earliest", "latest", an offset or a time, on ``partitions`` (default: all); returns
    the positions committed (``dry_run``: the positions it would commit, committing nothing)."""
    given = [x for x in (to, offset, timestamp_ms) if x is not None]
    if len(given) != 1 or (to is not None and to not in ("earliest", "latest")):
        raise invalid('give exactly one of "to" (earliest or latest), "offset" or "timestamp"')
    offsets = {}
    for p in partitions if partitions is not None else range(queue.partitions):
        number = partition_number(queue, p)
        offsets[number] = offset if offset is not None else await offset_at(queue, number, to if to is not None else timestamp_ms)
    if not dry_run:
        await commit(caller, queue, group, offsets)
    return offsets


# -- a group, described ---------------------------------------------------------------------------


async def group_view(caller: Caller, queue: QueueInfo, group: str, kind: str) -> dict:
    """A group of the queue as a person reads it: members with their assigned partitions of this queue, and per
    partition the position, log end, lag and age of the oldest record not yet consumed (for a queue group also
    what is in flight, delayed and being dead-lettered). 404 ``group_not_found`` when it has neither."""
    if kind not in ("stream", "queue"):
        raise invalid('kind is "stream" or "queue"')
    client = await pool.client(queue.bootstrap)
    topic = queue.broker_topic
    described = await describe_group(client, broker_group(caller, group, kind), kind)
    members = []
    for member in described.members:
        assigned = sorted(ref.partition for ref in member.assigned if ref.topic == topic)
        if assigned or topic in member.topics:
            members.append({"member_id": member.member_id, "client_id": member.client_id, "epoch": member.member_epoch,
                            "assigned": assigned,
                            "revoking": sorted(ref.partition for ref in member.revoking if ref.topic == topic)})
    shares = {s.partition: s for s in described.share_partitions if s.topic == topic}
    positions = {c.partition: c.offset for c in described.offsets if c.topic == topic and c.offset >= 0}
    if kind == "queue":
        positions = {p: s.start_offset for p, s in shares.items()}
    if not members and not positions:
        raise GatewayError("group_not_found", f"group {group!r} has no members and no position on {queue.name!r}")
    partitions = []
    now = int(time.time() * 1000)
    for number in range(queue.partitions):
        end, _ = await client.list_offset(topic, number, LATEST_TIMESTAMP)
        position = positions.get(number)
        if position is None and kind == "queue":  # not received from yet: it starts at the oldest record there
            position, _ = await client.list_offset(topic, number, EARLIEST_TIMESTAMP)
        lag = max(0, end - position) if position is not None else None
        stamp = await timestamp_at(client, topic, number, position, replica_id=INSPECTOR) if lag else None
        row = {"partition": number, "position": position, "log_end": end, "lag": lag,
               "oldest_age_ms": None if stamp is None else max(0, now - stamp),
               "members": [m["member_id"] for m in members if number in m["assigned"]]}
        share = shares.get(number)
        if share is not None:
            row.update(available=share.available, in_flight=share.in_flight, delayed=share.delayed,
                       dead_lettering=share.dead_lettering, read_offset=share.read_offset)
        partitions.append(row)
    return {"group": group, "kind": kind, "members": members, "partitions": partitions}
