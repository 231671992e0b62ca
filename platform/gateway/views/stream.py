"""The stream model over REST: read a partition from an offset, seek, commit, and consumer-group membership.

A REST consumer either reads partitions it chooses (committing offsets under
a group name) or joins a group: the coordinator assigns it partitions
(Kafka's KIP-848 protocol, the same as native consumers) and it heartbeats to
keep them, reading and committing each one.
"""

from __future__ import annotations

from tideway_server.gateway import limits, operations, pool
from tideway_server.gateway.errors import invalid
from tideway_server.gateway.views.base import Call, GatewayView, int_param, json_response
from tideway_server.gateway.wire import CommitBody, HeartbeatBody, SeekBody, decode, message_json

from tideway.native.group import fetch_committed
from tideway.protocol import messages as m
from tideway.protocol.messages import ApiKey

MAX_WAIT_SECONDS = 20
TIMESTAMP_MAX_MS = 2**53  # far past any real clock; bigger values cannot be a time


def _partition(call: Call, partition: str) -> int:
    return operations.partition_number(call.queue, int(partition))


async def _offset_at(call: Call, partition: int, where: str | int) -> int:
    return await operations.offset_at(call.queue, partition, where)


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
    return await operations.stream_link(call.caller, call.queue, group)


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
        await operations.commit(call.caller, call.queue, group, offsets, body.member_id, body.member_epoch)
        return json_response({"committed": [{"partition": p, "offset": o} for p, o in sorted(offsets.items())]})


class SeekView(GatewayView):
    """POST {"to": "earliest"|"latest"} or {"offset": N} or {"timestamp": MS}, optional "partitions": commits the position."""

    required_scopes = {"POST": "consume"}

    async def post(self, request, call, name, group):
        body = decode(request.body, SeekBody)
        offsets = await operations.seek(call.caller, call.queue, group, to=body.to, offset=body.offset,
                                        timestamp_ms=body.timestamp, partitions=body.partitions)
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
