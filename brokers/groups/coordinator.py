"""The group coordinator: stream groups, committed offsets and queue groups.

Every group belongs to one partition of the internal topic
``__consumer_offsets`` (a StateTopic: crc32 of the group id, modulo its partition count);
the broker that leads that partition is the group's coordinator. Everything
the coordinator must not forget (members and their assignments, committed
offsets, queue state) is written to that partition as keyed records and
acknowledged only once every in-sync replica has it (acks=all). The topic is
compacted: the latest record per key is the state. When leadership of the
partition moves, the new leader reads it back and carries on; the old one
drops its groups at once.

Record keys are msgpack lists, values msgpack maps or lists (None: deleted):

    ["group", group]                      {"type": "stream" | "queue"}
    ["member", group, member_id]          a stream member and its assignment
    ["offset", group, topic, partition]   {"offset", "metadata", "ts"} (in a producer's transaction: a
                                          transactional batch of it, counted once its commit marker follows)
    ["share", group, topic, partition]    a queue partition's state: a snapshot (brokers/queues/state_log.py)
    ["share-delta", group, topic, partition, slot]
                                          ... and the changes written after it

Ownership: the broker's event-loop thread.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from tideway_server.brokers.coordination.state_topic import StateTopic, partition_for_key
from tideway_server.brokers.groups.stream import Member, StreamGroup
from tideway_server.brokers.queues.service import QueueService
from tideway_server.brokers.queues.state_log import keys_written, replay
from tideway_server.brokers.storage import TopicConfig

from tideway.aio import cancel_and_wait
from tideway.protocol import errors
from tideway.protocol import messages as m

if TYPE_CHECKING:
    from tideway_server.brokers.server.metadata_cache import MetadataCache
    from tideway_server.brokers.server.replica_manager import ReplicaManager

    from tideway.native.client import TidewayClient

__all__ = ["INTERNAL_TOPIC", "GroupCoordinator", "partition_for_group"]

log = logging.getLogger(__name__)

INTERNAL_TOPIC = "__consumer_offsets"
INTERNAL_TOPIC_SETTINGS = {
    "cleanup.policy": "compact",
    "segment.bytes": str(16 << 20),
    # Rolled at least every 10 minutes, so the cleaner drops what groups no longer need (and merges the
    # small segments this makes) and the topic's size follows the live groups, not the traffic they had.
    "segment.ms": str(10 * 60 * 1000),
    "retention.ms": "-1",
    "max.message.bytes": str(8 << 20),
}
GROUP_ID_MAX = 255


def partition_for_group(group_id: str, partitions: int) -> int:
    return partition_for_key(group_id, partitions)


def _check_group_id(group_id: str) -> None:
    if not group_id or len(group_id) > GROUP_ID_MAX or not group_id.isprintable():
        raise errors.InvalidGroupIdError(f"group id {group_id!r} must be 1-{GROUP_ID_MAX} printable characters")


class GroupCoordinator:
    def __init__(
        self,
        *,
        broker_id: int,
        replicas: ReplicaManager,
        metadata: MetadataCache,
        create_topics: Callable[[m.CreateTopicsRequest], Awaitable[m.CreateTopicsResponse]],
        peer_client: Callable[[], TidewayClient],
        internal_partitions: int = 8,
        heartbeat_interval_ms: int = 1_000,
        queue_idle_unload_ms: int = 300_000,
    ) -> None:
        self.broker_id = broker_id
        self.replicas = replicas
        self.metadata = metadata  # topics and their settings
        self.state = StateTopic(INTERNAL_TOPIC, partitions=internal_partitions, settings=INTERNAL_TOPIC_SETTINGS,
                                broker_id=broker_id, replicas=replicas, metadata=metadata, create_topics=create_topics,
                                on_load=self._load, on_unload=self._unload, what="group")
        self.internal_partitions = internal_partitions
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.group_types: dict[str, str] = {}
        self.stream_groups: dict[str, StreamGroup] = {}
        # Offsets committed in open transactions: (internal partition, producer id) -> {(group, topic, partition):
        # (offset, metadata, ts)}; they become the groups' offsets when the transaction's commit marker is written.
        self.pending_offsets: dict[tuple[int, int], dict[tuple[str, str, int], tuple[int, str, int]]] = {}
        # The members a group has over Kafka's classic protocol (the Kafka listener's ClassicGroups): described with
        # the group's own, and counted when a topic's positions are deleted.
        self.classic_members: Callable[[str], list[m.MemberDescription]] = lambda group_id: []
        self.queues = QueueService(self, peer_client, on_delivered=replicas.metrics.traffic.add_out,
                                   idle_unload_s=queue_idle_unload_ms / 1000)
        replicas.metrics.watch_queues(self.queues.held_counts)
        self._sweeper: asyncio.Task | None = None
        self._tombstone_writes: set[asyncio.Task] = set()  # see forget_topics

    def start(self) -> None:
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep_forever())
        self.queues.start()

    async def stop(self) -> None:
        await cancel_and_wait(*(t for t in (self._sweeper,) if t is not None), *self._tombstone_writes)
        await self.state.stop()
        await self.queues.stop()

    # -- which groups are ours ------------------------------------------------------------

    def _internal_partition_count(self) -> int | None:
        return self.state.partition_count()

    @property
    def loaded(self) -> dict[int, int]:
        return self.state.loaded

    def on_roles_changed(self) -> None:
        """Load the groups of internal partitions we now lead; drop the ones we no longer lead."""
        self.state.on_roles_changed()

    def check_coordinator(self, group_id: str) -> int:
        """The internal partition of ``group_id``; raise unless this broker coordinates it."""
        _check_group_id(group_id)
        return self.state.check(group_id)

    async def find_coordinator(self, request: m.FindCoordinatorRequest, session) -> m.FindCoordinatorResponse:
        _check_group_id(request.group_id)
        return self.state.coordinator_of(request.group_id, session.listener)

    # -- the state log ------------------------------------------------------------------------

    def _load(self, index: int, latest: dict[tuple, object], pending: dict[int, dict[tuple, object]]) -> None:
        """The latest state records of internal partition ``index`` (this broker leads it now): its groups, and the
        offsets of transactions not ended yet."""
        for producer_id, written in pending.items():
            offsets = {(key[1], key[2], key[3]): (value["offset"], value["metadata"], value["ts"])
                       for key, value in written.items() if key[0] == "offset" and value is not None}
            if offsets:
                self.pending_offsets[(index, producer_id)] = offsets
        members: dict[str, list[Member]] = defaultdict(list)
        shares: dict[tuple, dict] = {}
        groups = 0
        for key, value in latest.items():
            if value is None:
                continue
            kind, group_id = key[0], key[1]
            if kind == "group":
                self.group_types[group_id] = value["type"]
                groups += 1
            elif kind == "member":
                members[group_id].append(Member.from_value(key[2], value))
            elif kind == "offset":
                group = self.stream_groups.setdefault(group_id, StreamGroup(group_id))
                group.offsets[(key[2], key[3])] = (value["offset"], value["metadata"], value["ts"])
            elif kind == "share":
                shares.setdefault(key[1:4], [None, []])[0] = value
            elif kind == "share-delta":
                shares.setdefault(key[1:4], [None, []])[1].append(value)
        for (group_id, topic, number), (snapshot, deltas) in shares.items():
            replayed = replay(snapshot, deltas)
            if replayed is not None:
                self.queues.restore(group_id, topic, number, *replayed)
        for group_id, group_members in members.items():
            group = self.stream_groups.setdefault(group_id, StreamGroup(group_id))
            for member in group_members:
                group.restore_member(member)
            group.after_restore(self.partition_counts(group.subscribed_topics()))
        log.info("%s-%d: %d groups", INTERNAL_TOPIC, index, groups)

    def forget_topics(self, names: list[str]) -> None:
        """Topics were deleted: drop what groups kept about them here and tombstone it in the state log, so
        ``__consumer_offsets`` holds what live groups need, not everything groups ever touched.

        Groups coordinated elsewhere are the other brokers' business (every broker hears of a deletion).
        """
        count = self._internal_partition_count()
        if not names or count is None:
            return
        tombstones: dict[int, list[tuple[list, object]]] = defaultdict(list)
        for topic in names:
            for group_id, number, seq in self.queues.forget_topic(topic):
                tombstones[partition_for_group(group_id, count)] += [(key, None) for key in keys_written(group_id, topic, number, seq)]
            for group_id, group in self.stream_groups.items():
                for tp in [tp for tp in group.offsets if tp[0] == topic]:
                    del group.offsets[tp]
                    tombstones[partition_for_group(group_id, count)].append((["offset", group_id, *tp], None))
        for index, records in tombstones.items():
            if index in self.loaded:
                task = asyncio.get_running_loop().create_task(self._write_tombstones(index, records))
                self._tombstone_writes.add(task)
                task.add_done_callback(self._tombstone_writes.discard)

    async def _write_tombstones(self, index: int, records: list[tuple[list, object]]) -> None:
        try:
            for start in range(0, len(records), 1000):
                await self.write(index, records[start:start + 1000])
            log.info("%s-%d: forgot %d keys of deleted topics", INTERNAL_TOPIC, index, len(records))
        except errors.TidewayError as exc:  # the next coordinator's state still names them; harmless, only bigger
            log.info("%s-%d: tombstones of deleted topics not written: %s", INTERNAL_TOPIC, index, exc)

    def _unload(self, index: int) -> None:
        for key in [key for key in self.pending_offsets if key[0] == index]:
            del self.pending_offsets[key]
        count = self._internal_partition_count() or self.internal_partitions
        for group_id in [g for g in set(self.group_types) | set(self.stream_groups) if partition_for_group(g, count) == index]:
            self.group_types.pop(group_id, None)
            self.stream_groups.pop(group_id, None)
            self.queues.unload_group(group_id)

    async def write(self, index: int, records: list[tuple[list, object]]) -> None:
        """Append state records and return once every in-sync replica has them."""
        await self.state.write(index, records)

    async def set_type(self, index: int, group_id: str, group_type: str) -> None:
        known = self.group_types.get(group_id)
        if known == group_type:
            return
        if known is not None:
            raise errors.InconsistentGroupTypeError(f"group {group_id!r} is a {known} group; use another group id")
        self.group_types[group_id] = group_type
        try:
            await self.write(index, [(["group", group_id], {"type": group_type})])
        except errors.TidewayError:
            self.group_types.pop(group_id, None)
            raise

    # -- topics -----------------------------------------------------------------------------

    def topic_config(self, topic: str) -> TopicConfig:
        return self.metadata.topic_config(topic)

    def local_partition(self, topic: str, partition: int):
        """This broker's replica of ``topic``-``partition``, if it holds one (the queue service reads leaders' logs directly)."""
        return self.replicas.partitions.get((topic, partition))

    def partition_counts(self, topics) -> dict[str, int]:
        out = {}
        for topic in topics:
            try:
                out[topic] = self.topic_config(topic).partitions
            except errors.UnknownTopicOrPartitionError:
                out[topic] = 0
        return out

    # -- stream groups ---------------------------------------------------------------------------

    async def heartbeat(self, request: m.ConsumerGroupHeartbeatRequest) -> m.ConsumerGroupHeartbeatResponse:
        index = self.check_coordinator(request.group_id)
        group_id = request.group_id
        await self.set_type(index, group_id, "stream")
        group = self.stream_groups.setdefault(group_id, StreamGroup(group_id))
        topics = set(request.topics or ()) | group.subscribed_topics()
        member, changed = group.heartbeat(
            member_id=request.member_id,
            member_epoch=request.member_epoch,
            topics=request.topics,
            owned=None if request.owned is None else [(tp.topic, tp.partition) for tp in request.owned],
            session_timeout_ms=request.session_timeout_ms,
            client_id=request.client_id,
            partition_counts=self.partition_counts(topics),
        )
        if changed:
            await self.write(index, [(["member", group_id, c.member_id], None if c.member_id not in group.members else c.to_value()) for c in changed])
        if member is None:
            return m.ConsumerGroupHeartbeatResponse(member_id=request.member_id, member_epoch=-1)
        return m.ConsumerGroupHeartbeatResponse(
            member_id=member.member_id,
            member_epoch=member.epoch,
            heartbeat_interval_ms=min(self.heartbeat_interval_ms, member.session_timeout_ms // 3),
            assignment=[m.TopicPartitionRef(topic=t, partition=p) for t, p in sorted(member.assigned)],
        )

    async def offset_commit(self, request: m.OffsetCommitRequest) -> m.OffsetCommitResponse:
        index = self.check_coordinator(request.group_id)
        group_id = request.group_id
        await self.set_type(index, group_id, "stream")
        group = self.stream_groups.setdefault(group_id, StreamGroup(group_id))
        now = int(time.time() * 1000)
        results, records, accepted = [], [], []
        for item in request.offsets:
            tp = (item.topic, item.partition)
            result = m.CommittedOffset(topic=item.topic, partition=item.partition, offset=item.offset)
            refusal = self._commit_refusal(group, request.member_id, item)
            if refusal is not None:
                result.error_code, result.error_message = refusal.errno, refusal.message
            else:
                records.append((["offset", group_id, item.topic, item.partition], {"offset": item.offset, "metadata": item.metadata, "ts": now}))
                accepted.append((tp, (item.offset, item.metadata, now)))
            results.append(result)
        if records:
            await self.write(index, records)
            for tp, value in accepted:
                group.offsets[tp] = value
        return m.OffsetCommitResponse(offsets=results)

    def _commit_refusal(self, group: StreamGroup, member_id: str, item: m.CommittedOffset) -> errors.BrokerError | None:
        """Why ``member_id`` may not commit ``item`` for ``group`` (None: it may)."""
        if item.offset < 0:
            return errors.InvalidRequestError("offsets are never negative")
        if not 0 <= item.partition < self.partition_counts([item.topic])[item.topic]:
            # As Kafka does: an offset of a partition that does not exist is refused, never kept.
            return errors.UnknownTopicOrPartitionError(f"{item.topic}-{item.partition} does not exist")
        if member_id and not group.owns(member_id, (item.topic, item.partition)):
            if member_id not in group.members:
                return errors.UnknownMemberIdError(f"member {member_id!r} is not in group {group.group_id!r}: rejoin")
            return errors.NotAssignedError(f"member {member_id!r} does not own {item.topic}-{item.partition}")
        if not member_id and group.members:
            return errors.UnknownMemberIdError(f"group {group.group_id!r} has members: only they may commit")
        return None

    async def offset_fetch(self, request: m.OffsetFetchRequest) -> m.OffsetFetchResponse:
        index = self.check_coordinator(request.group_id)
        group = self.stream_groups.get(request.group_id)
        offsets = {} if group is None else group.offsets
        wanted = sorted(offsets) if request.partitions is None else [(tp.topic, tp.partition) for tp in request.partitions]
        unstable = self._pending_partitions(index, request.group_id) if request.require_stable else set()
        out = []
        for tp in wanted:
            offset, metadata, ts = offsets.get(tp, (-1, "", -1))
            result = m.CommittedOffset(topic=tp[0], partition=tp[1], offset=offset, metadata=metadata, commit_timestamp_ms=ts)
            if tp in unstable:
                exc = errors.UnstableOffsetCommitError(f"an open transaction commits the offset of {tp[0]}-{tp[1]}")
                result.offset, result.error_code, result.error_message = -1, exc.errno, exc.message
            out.append(result)
        return m.OffsetFetchResponse(offsets=out)

    def _pending_partitions(self, index: int, group_id: str) -> set[tuple[str, int]]:
        return {(topic, partition) for (i, _pid), offsets in self.pending_offsets.items() if i == index
                for (group, topic, partition) in offsets if group == group_id}

    async def txn_offset_commit(self, request: m.TxnOffsetCommitRequest) -> m.TxnOffsetCommitResponse:
        """Offsets committed in a producer's transaction: written as its transactional batch, counted once its
        commit marker reaches this partition (``on_txn_marker``). A consumer's membership is checked as for any
        commit, so a zombie member (fenced from the group) cannot commit in a transaction either."""
        index = self.check_coordinator(request.group_id)
        group_id = request.group_id
        await self.set_type(index, group_id, "stream")
        group = self.stream_groups.setdefault(group_id, StreamGroup(group_id))
        now = int(time.time() * 1000)
        results, records, accepted = [], [], {}
        for item in request.offsets:
            result = m.CommittedOffset(topic=item.topic, partition=item.partition, offset=item.offset)
            refusal = self._commit_refusal(group, request.member_id, item)
            if refusal is not None:
                result.error_code, result.error_message = refusal.errno, refusal.message
            else:
                records.append((["offset", group_id, item.topic, item.partition],
                                {"offset": item.offset, "metadata": item.metadata, "ts": now}))
                accepted[(group_id, item.topic, item.partition)] = (item.offset, item.metadata, now)
            results.append(result)
        if records:
            await self.state.write(index, records, transaction=(request.producer_id, request.producer_epoch))
            self.pending_offsets.setdefault((index, request.producer_id), {}).update(accepted)
        return m.TxnOffsetCommitResponse(offsets=results)

    def on_txn_marker(self, topic: str, index: int, producer_id: int, commit: bool) -> None:
        """A transaction's marker is in internal partition ``index`` (and on every in-sync replica): its offsets
        count, or are dropped."""
        if topic != INTERNAL_TOPIC:
            return
        written = self.pending_offsets.pop((index, producer_id), None)
        if not written or not commit:
            return
        for (group_id, topic_name, partition), value in written.items():
            self.stream_groups.setdefault(group_id, StreamGroup(group_id)).offsets[(topic_name, partition)] = value

    async def offset_delete(self, request: m.OffsetDeleteRequest) -> m.OffsetDeleteResponse:
        """Forget a stream group's positions on the partitions named, refused for a topic its members read (as
        Kafka's OffsetDelete); a group left with no position and no member is gone (its type record too), so
        the name is free for a queue group. Tombstones in the state log, written before the answer."""
        index = self.check_coordinator(request.group_id)
        group_id = request.group_id
        if self.group_types.get(group_id) == "queue":
            raise errors.InconsistentGroupTypeError(f"group {group_id!r} is a queue group: its positions are its queue's")
        group = self.stream_groups.get(group_id)
        read = set() if group is None else {t for mb in group.members.values() for t in mb.topics}
        read |= {t for mb in self.classic_members(group_id) for t in mb.topics}
        results, records, forgotten = [], [], []
        for ref in request.partitions:
            result = m.CommittedOffset(topic=ref.topic, partition=ref.partition)
            if ref.topic in read:
                exc = errors.GroupSubscribedToTopicError(f"members of group {group_id!r} read {ref.topic}: stop them first")
                result.error_code, result.error_message = exc.errno, exc.message
            elif group is not None and (ref.topic, ref.partition) in group.offsets:
                records.append((["offset", group_id, ref.topic, ref.partition], None))
                forgotten.append((ref.topic, ref.partition))
            results.append(result)
        emptied = group is not None and not group.members and set(group.offsets) <= set(forgotten) and bool(forgotten)
        if emptied:
            records.append((["group", group_id], None))
        if records:
            await self.write(index, records)
            for tp in forgotten:
                group.offsets.pop(tp, None)
            if emptied:
                self.stream_groups.pop(group_id, None)
                self.group_types.pop(group_id, None)
        return m.OffsetDeleteResponse(partitions=results)

    async def list_groups(self, request: m.ListGroupsRequest) -> m.ListGroupsResponse:
        """The groups of the internal partitions this broker coordinates (each broker answers for its own).

        One pass over the groups and one over the queue state, whatever their number (a console lists
        thousands of groups of one queue with this, positions included, in one request per broker).
        """
        topic = request.topic
        queue_positions = self.queues.positions()
        out = []
        for group_id in sorted(set(self.group_types) | set(self.stream_groups) | set(queue_positions)):
            group = self.stream_groups.get(group_id)
            kind = self.group_types.get(group_id) or ("stream" if group is not None else "queue")
            shares = queue_positions.get(group_id, ())
            if topic is not None:
                on_topic = group is not None and (any(t == topic for t, _ in group.offsets)
                                                  or any(topic in mb.topics for mb in group.members.values()))
                on_topic = on_topic or any(share[0] == topic for share in shares)
                if not on_topic:
                    continue
            listed = m.ListedGroup(group_id=group_id, group_type=kind)
            if request.with_positions:
                positions = [m.GroupPosition(t, p, o, in_flight) for t, p, o, in_flight in shares]
                if group is not None:
                    listed.members = len(group.members)
                    positions += [m.GroupPosition(t, p, o) for (t, p), (o, _md, _ts) in group.offsets.items()]
                listed.positions = sorted((p for p in positions if topic is None or p.topic == topic),
                                          key=lambda p: (p.topic, p.partition))
            out.append(listed)
        return m.ListGroupsResponse(groups=out)

    async def describe(self, request: m.DescribeGroupRequest) -> m.DescribeGroupResponse:
        self.check_coordinator(request.group_id)
        group_id = request.group_id
        response = m.DescribeGroupResponse(group_id=group_id, group_type=self.group_types.get(group_id, ""), coordinator=self.broker_id)
        group = self.stream_groups.get(group_id)
        if group is not None:
            response.group_epoch = group.epoch
            response.members = [
                m.MemberDescription(
                    member_id=mb.member_id, client_id=mb.client_id, member_epoch=mb.epoch, topics=mb.topics,
                    assigned=[m.TopicPartitionRef(topic=t, partition=p) for t, p in sorted(mb.assigned)],
                    revoking=[m.TopicPartitionRef(topic=t, partition=p) for t, p in sorted(mb.revoking)],
                )
                for mb in group.members.values()
            ]
            response.offsets = [
                m.CommittedOffset(topic=t, partition=p, offset=o, metadata=md, commit_timestamp_ms=ts)
                for (t, p), (o, md, ts) in sorted(group.offsets.items())
            ]
        response.members += self.classic_members(group_id)
        response.share_partitions = self.queues.describe(group_id)
        return response

    # -- background --------------------------------------------------------------------------------

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(0.2)
            try:
                await self._expire_members()
            except errors.TidewayError as exc:
                log.info("member expiry: %s", exc)
            except Exception:
                log.exception("member expiry failed")

    async def _expire_members(self) -> None:
        now = time.monotonic()
        count = self._internal_partition_count()
        if count is None:
            return
        for group_id, group in list(self.stream_groups.items()):
            if not group.members:
                continue
            gone = group.expire(now, self.partition_counts(group.subscribed_topics()))
            for member in gone:
                log.info("group %s: member %s expired (no heartbeat for %d ms)", group_id, member.member_id, member.session_timeout_ms)
            if gone:
                await self.write(partition_for_group(group_id, count), [(["member", group_id, mb.member_id], None) for mb in gone])

