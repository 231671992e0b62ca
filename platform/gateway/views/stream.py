"""The stream model over REST: read a partition from an offset, seek, commit, and consumer-group membership.

A REST consumer either reads partitions it chooses (committing offsets under
a group name) or joins a group: the coordinator assigns it partitions
(Kafka's KIP-848 protocol, the same as native consumers) and it heartbeats to
keep them, reading and committing each one.
"""

from __future__ import annotations

from brokers.client.group import commit_offsets, fetch_committed
from brokers.protocol import messages as m
from brokers.protocol.messages import ApiKey
from gateway import limits, pool
from gateway.errors import GatewayError, invalid
from gateway.views.base import Call, GatewayView, broker_group, int_param, json_response
from gateway.wire import CommitBody, HeartbeatBody, SeekBody, decode, message_json

MAX_WAIT_SECONDS = 20
TIMESTAMP_MAX_MS = 2**53  # far past any real clock; bigger values cannot be a time


def _partition(call: Call, partition: str) -> int:
    number = int(partition)
    if number >= call.queue.partitions:
        raise GatewayError("not_found", f"queue {call.queue.name!r} has no partition {number} (it has {call.queue.partitions})", 404)
    return number


async def _offset_at(call: Call, partition: int, where: str | int) -> int:
    """An offset from "earliest", "latest" or a timestamp (ms); for a timestamp past the end, the end."""
    broker_client = await pool.client(call.queue.bootstrap)
    stamp = {"earliest": m.EARLIEST_TIMESTAMP, "latest": m.LATEST_TIMESTAMP}.get(where, where)
    offset, _ = await broker_client.list_offset(call.queue.broker_topic, partition, stamp)
    if offset < 0:
        offset, _ = await broker_client.list_offset(call.queue.broker_topic, partition, m.LATEST_TIMESTAMP)
    return offset


class PartitionMessagesView(GatewayView):
    """GET ?offset=N | ?from=earliest|latest | ?timestamp=MS, &max_messages, &wait_seconds (long polling)."""

    required_scopes = {"GET": "consume"}
    consuming_methods = frozenset({"GET"})

    async def get(self, request, call, name, partition):
        number = _partition(call, partition)
        max_messages = int_param(request, "max_messages", 100, low=1, high=1000)
        wait_s = int_param(request, "wait_seconds", 0, low=0, high=MAX_WAIT_SECONDS)
        offset = int_param(request, "offset", None, low=0)
        if offset is None:
            timestamp = int_param(request, "timestamp", None, low=0, high=TIMESTAMP_MAX_MS)
            start = request.GET.get("from", "earliest")
            if timestamp is None and start not in ("earliest", "latest"):
                raise invalid("from must be earliest or latest (or give offset or timestamp)")
            offset = await _offset_at(call, number, timestamp if timestamp is not None else start)
        records, next_offset, high_watermark = await pool.read_partition(
            call.queue.bootstrap, call.queue.broker_topic, number, offset, max_records=max_messages, wait_ms=wait_s * 1000)
        base64_always = request.GET.get("encoding") == "base64"
        await limits.charge_consumed(call.caller, sum(len(r.value or b"") + len(r.key or b"") for r in records))
        return json_response({
            "messages": [message_json(partition=number, offset=r.offset, timestamp_ms=r.timestamp_ms, key=r.key, value=r.value,
                                      headers=r.headers, base64_always=base64_always) for r in records],
            "next_offset": next_offset, "high_watermark": high_watermark,
        })


class PartitionOffsetsView(GatewayView):
    """GET: the earliest and latest offsets of a partition, and with ?timestamp=MS the first offset at or after it."""

    required_scopes = {"GET": "consume"}

    async def get(self, request, call, name, partition):
        number = _partition(call, partition)
        answer = {"partition": number, "earliest": await _offset_at(call, number, "earliest"),
                  "latest": await _offset_at(call, number, "latest")}
        timestamp = int_param(request, "timestamp", None, low=0, high=TIMESTAMP_MAX_MS)
        if timestamp is not None:
            answer["offset"] = await _offset_at(call, number, timestamp)
        return json_response(answer)


async def _link(call: Call, group: str):
    return await pool.coordinator(call.queue.bootstrap, broker_group(call, group, "stream"))


async def _check_within_log(call: Call, offsets: dict[int, int]) -> None:
    """A committed position is an offset of the log or its end (the next to be written), nothing past it."""
    for partition, offset in sorted(offsets.items()):
        latest = await _offset_at(call, partition, "latest")
        if offset > latest:
            raise GatewayError("offset_out_of_range", f"offset {offset} is past the end of partition {partition} "
                               f"(its next offset is {latest})", 416,
                               details={"partition": partition, "offset": offset, "latest": latest})


async def _commit(call: Call, group: str, offsets: dict[int, int], member_id: str = "", member_epoch: int = -1) -> None:
    await _check_within_log(call, offsets)
    topic = call.queue.broker_topic
    await commit_offsets(await _link(call, group), {(topic, p): o for p, o in sorted(offsets.items())},
                         member_id=member_id, member_epoch=member_epoch)


class GroupOffsetsView(GatewayView):
    """GET: the group's committed offset and lag per partition. POST: commit offsets."""

    required_scopes = {"GET": "consume", "POST": "consume"}

    async def get(self, request, call, name, group):
        link = await _link(call, group)
        topic = call.queue.broker_topic
        committed = await fetch_committed(link, [(topic, p) for p in range(call.queue.partitions)])
        out = []
        for p in range(call.queue.partitions):
            latest = await _offset_at(call, p, "latest")
            offset = committed.get((topic, p), -1)
            # Never negative: a position past the end (retention, an older commit) has nothing left to read.
            out.append({"partition": p, "committed": offset, "latest": latest,
                        "lag": max(latest - offset, 0) if offset >= 0 else None})
        return json_response({"group": group, "partitions": out})

    async def post(self, request, call, name, group):
        body = decode(request.body, CommitBody)
        if not body.offsets:
            raise invalid("offsets is empty")
        offsets = {}
        for entry in body.offsets:
            offsets[_partition(call, str(entry.partition))] = entry.offset
        await _commit(call, group, offsets, body.member_id, body.member_epoch)
        return json_response({"committed": [{"partition": p, "offset": o} for p, o in sorted(offsets.items())]})


class SeekView(GatewayView):
    """POST {"to": "earliest"|"latest"} or {"offset": N} or {"timestamp": MS}, optional "partitions": commits the position."""

    required_scopes = {"POST": "consume"}

    async def post(self, request, call, name, group):
        body = decode(request.body, SeekBody)
        given = [x for x in (body.to, body.offset, body.timestamp) if x is not None]
        if len(given) != 1 or (body.to is not None and body.to not in ("earliest", "latest")):
            raise invalid('give exactly one of "to" (earliest or latest), "offset" or "timestamp"')
        partitions = body.partitions if body.partitions is not None else list(range(call.queue.partitions))
        offsets = {}
        for p in partitions:
            number = _partition(call, str(p))
            if body.offset is not None:
                offsets[number] = body.offset
            else:
                offsets[number] = await _offset_at(call, number, body.to if body.to is not None else body.timestamp)
        await _commit(call, group, offsets)
        return json_response({"offsets": [{"partition": p, "offset": o} for p, o in sorted(offsets.items())]})


async def _heartbeat(call: Call, group: str, member_id: str, epoch: int, owned: list[int] | None, session_ms: int) -> dict:
    link = await _link(call, group)
    topic = call.queue.broker_topic
    request = m.ConsumerGroupHeartbeatRequest(
        group_id=link.group_id, member_id=member_id, member_epoch=epoch, topics=[topic] if epoch == 0 else None,
        owned=None if owned is None else [m.TopicPartitionRef(topic=topic, partition=p) for p in owned],
        session_timeout_ms=session_ms, client_id="rest")
    response: m.ConsumerGroupHeartbeatResponse = await link.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, request, retry_for_s=5)
    return {"member_id": response.member_id, "member_epoch": response.member_epoch,
            "heartbeat_interval_ms": response.heartbeat_interval_ms,
            "assignment": sorted(tp.partition for tp in response.assignment if tp.topic == topic)}


class MembersView(GatewayView):
    """POST: join the group; the answer names the member, its epoch and its partitions."""

    required_scopes = {"POST": "consume"}

    async def post(self, request, call, name, group):
        body = decode(request.body, HeartbeatBody)
        if not 1_000 <= body.session_timeout_ms <= 300_000:
            raise invalid("session_timeout_ms must be 1000 to 300000")
        return json_response(await _heartbeat(call, group, "", 0, [], body.session_timeout_ms), status=201)


class MemberView(GatewayView):
    """POST: heartbeat (with the epoch and the partitions held) -> the current assignment. DELETE: leave."""

    required_scopes = {"POST": "consume", "DELETE": "consume"}

    async def post(self, request, call, name, group, member_id):
        body = decode(request.body, HeartbeatBody)
        if body.member_epoch < 0:
            raise invalid("member_epoch must be the epoch of the last answer (join with POST .../members)")
        return json_response(await _heartbeat(call, group, member_id, body.member_epoch, body.owned, body.session_timeout_ms))

    async def delete(self, request, call, name, group, member_id):
        await _heartbeat(call, group, member_id, -1, None, 30_000)
        return json_response({"left": member_id})
