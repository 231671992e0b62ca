"""Consumer groups for clients: the stream model (GroupConsumer) and group admin.

``GroupConsumer`` joins a group, gets partitions from the coordinator
(server-side assignment, KIP-848 style) and reads them with a ``Consumer``.
Assignment changes are applied inside ``getmany``, that is between two
batches of the application: a revoked partition's position is committed
(with auto commit) and only then reported as released, so the next owner
starts where this one stopped and never sees a committed record again.

If the coordinator cannot be reached for longer than the session timeout,
the member can no longer prove it owns anything: it drops every partition
(``on_lost``) before the coordinator may give them to someone else.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from typing import Literal

from tideway.aio import cancel_and_wait
from tideway.native.client import HEDGE_AFTER_S, TidewayClient
from tideway.native.consumer import Consumer, TopicPartition
from tideway.protocol import errors
from tideway.protocol import messages as m
from tideway.protocol.messages import ApiKey
from tideway.record.batch import Record, decode_records
from tideway.record.markers import readable_batches
from tideway.retry import Backoff

__all__ = ["CoordinatorLink", "GroupConsumer", "delete_offsets", "describe_group", "group_lag", "group_positions", "list_groups",
           "timestamp_at"]

log = logging.getLogger(__name__)

_RETRY = (
    errors.NotCoordinatorError,
    errors.CoordinatorNotAvailableError,
    errors.CoordinatorLoadInProgressError,
    errors.ConnectionClosedError,
    errors.ClientTimeoutError,
    errors.RequestTimedOutError,
    errors.NotEnoughReplicasError,
    errors.LeaderNotAvailableError,
    errors.AuthenticationUnavailableError,
)
REQUEST_STALL_S = 1.0  # a group request unanswered this long past its own wait has its coordinator checked ...
STALL_CHECK_S = 0.5  # ... this often: a frozen coordinator's group moves within the session timeout (issue 40)


class CoordinatorLink:
    """Sends one group's requests to its coordinator, finding it again whenever it moves."""

    def __init__(self, client: TidewayClient, group_id: str, *, retry_for_s: float = 30.0, group_type: str = "stream",
                 coordination_connection: bool = False) -> None:
        self.client = client
        self.group_id = group_id
        self.coordination_connection = coordination_connection  # see TidewayClient.connection
        self.group_type = group_type  # stream | queue: a tenant's groups of each kind are different groups
        self.retry_for_s = retry_for_s
        self.node_id: int | None = None

    async def find(self) -> int:
        """The node id of the group's coordinator (waiting while there is none)."""
        await self.request(ApiKey.DESCRIBE_GROUP, m.DescribeGroupRequest(group_id=self.group_id, group_type=self.group_type))
        assert self.node_id is not None
        return self.node_id

    async def request(self, api: ApiKey, body, *, timeout_s: float | None = None, retry_for_s: float | None = None,
                      wait_s: float = 0.0):
        """Send to the coordinator and return its answer, finding it again while retriable errors last.

        ``wait_s``: how long the request may wait at the coordinator by design (a receive's long poll); past it
        and REQUEST_STALL_S, the coordinator is looked up again, and a request left at one that lost the group
        (frozen, cut off) is abandoned and sent to the new one rather than waited out to ``timeout_s``.
        """
        backoff = Backoff(initial_s=0.05, max_s=0.5, deadline_s=self.retry_for_s if retry_for_s is None else retry_for_s)
        while True:
            try:
                if self.node_id is None:
                    found: m.FindCoordinatorResponse = await self.client.request_any(
                        ApiKey.FIND_COORDINATOR, m.FindCoordinatorRequest(group_id=self.group_id, group_type=self.group_type),
                        hedge_after_s=HEDGE_AFTER_S)  # type: ignore[assignment]
                    if found.node_id not in self.client.brokers:
                        await self.client.refresh_metadata()
                    self.node_id = found.node_id
                connection = await self.client.connection(self.node_id, coordination=self.coordination_connection)
                return await self._answer(connection, api, body, timeout_s or self.client.request_timeout_s, wait_s)
            except _RETRY as exc:
                self.node_id = None
                log.debug("group %s: %s; finding the coordinator again", self.group_id, exc)
                if not await backoff.wait():
                    raise
                try:
                    await self.client.refresh_metadata()
                except errors.TidewayError:
                    pass


    async def _answer(self, connection, api: ApiKey, body, timeout_s: float, wait_s: float):
        answer = connection.send(api, body)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        try:
            done, _ = await asyncio.wait((answer,), timeout=min(timeout_s, wait_s + REQUEST_STALL_S))
            while not done:
                if loop.time() >= deadline:
                    raise errors.ClientTimeoutError(f"{api.name} to broker {self.node_id} got no answer within "
                                                    f"{timeout_s:.1f}s")
                if await self._moved():
                    raise errors.NotCoordinatorError(f"group {self.group_id} moved from broker {self.node_id} while "
                                                     f"its {api.name} waited there")
                done, _ = await asyncio.wait((answer,), timeout=max(0.0, min(STALL_CHECK_S, deadline - loop.time())))
            return answer.result()
        finally:
            if not answer.done():
                answer.cancel()  # a late answer is dropped by the connection

    async def _moved(self) -> bool:
        """Whether another broker now coordinates the group (a lookup that fails says nothing)."""
        try:
            found: m.FindCoordinatorResponse = await self.client.request_any(
                ApiKey.FIND_COORDINATOR, m.FindCoordinatorRequest(group_id=self.group_id, group_type=self.group_type),
                hedge_after_s=HEDGE_AFTER_S, timeout_s=STALL_CHECK_S * 2)  # type: ignore[assignment]
        except (errors.TidewayError, OSError):
            return False
        return found.node_id != self.node_id


Listener = Callable[[list[TopicPartition]], None]


class GroupConsumer:
    def __init__(
        self,
        client: TidewayClient | str,
        group_id: str,
        topics: list[str],
        *,
        auto_offset_reset: Literal["earliest", "latest"] = "latest",
        enable_auto_commit: bool = True,
        auto_commit_interval_ms: int = 5_000,
        session_timeout_ms: int = 45_000,
        client_id: str = "",
        on_assigned: Listener | None = None,
        on_revoked: Listener | None = None,
        on_lost: Listener | None = None,
        api_key: str | None = None,
        **consumer_options,
    ) -> None:
        self._own_client = isinstance(client, str)
        self.client = TidewayClient(client, api_key=api_key) if isinstance(client, str) else client
        self.group_id = group_id
        self.topics = sorted(set(topics))
        self.auto_offset_reset = auto_offset_reset
        self.enable_auto_commit = enable_auto_commit
        self.auto_commit_interval_s = auto_commit_interval_ms / 1000
        self.session_timeout_ms = session_timeout_ms
        self.client_id = client_id
        self.member_id = uuid.uuid4().hex
        self.member_epoch = 0
        # Heartbeats and commits on a connection of their own: a client running many groups
        # keeps many fetches waiting on its data connections.
        self.link = CoordinatorLink(self.client, group_id, coordination_connection=True)
        self.consumer = Consumer(self.client, auto_offset_reset=auto_offset_reset, **consumer_options)
        self._on_assigned = on_assigned
        self._on_revoked = on_revoked
        self._on_lost = on_lost
        self._owned: set[TopicPartition] = set()
        self._target: set[TopicPartition] | None = None  # the coordinator's latest answer, not applied yet
        self._lease_from = 0.0  # when the last answered heartbeat was sent
        self._subscription_sent = False
        self._heartbeat_now = asyncio.Event()
        self._heartbeat: asyncio.Task | None = None
        self._last_commit = time.monotonic()
        self._stopped = False
        self.heartbeat_interval_s = 1.0

    async def start(self) -> None:
        if self._own_client:
            await self.client.start()
        await self.consumer.start()
        await self._send_heartbeat()  # join now, so the first getmany has partitions
        self._heartbeat = asyncio.get_running_loop().create_task(self._heartbeat_loop())

    async def __aenter__(self) -> GroupConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.stop()

    def assignment(self) -> list[TopicPartition]:
        return sorted(self._owned)

    # -- membership ------------------------------------------------------------------------

    async def _heartbeat_loop(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self._heartbeat_now.wait(), self.heartbeat_interval_s)
            except TimeoutError:
                pass
            self._heartbeat_now.clear()
            try:
                await self._send_heartbeat()
            except (errors.UnknownMemberIdError, errors.FencedMemberEpochError) as exc:
                log.warning("group %s: %s; dropping every partition and rejoining", self.group_id, exc)
                self.member_epoch = 0
                self._subscription_sent = False
                self._target = set()
                self._heartbeat_now.set()
            except errors.TidewayError as exc:
                log.info("group %s: heartbeat failed: %s", self.group_id, exc)
                await asyncio.sleep(0.2)

    async def _send_heartbeat(self) -> None:
        sent_at = time.monotonic()
        request = m.ConsumerGroupHeartbeatRequest(
            group_id=self.group_id,
            member_id=self.member_id,
            member_epoch=self.member_epoch,
            topics=None if self._subscription_sent and self.member_epoch > 0 else self.topics,
            owned=[m.TopicPartitionRef(topic=t, partition=p) for t, p in sorted(self._owned)],
            session_timeout_ms=self.session_timeout_ms,
            client_id=self.client_id,
        )
        response: m.ConsumerGroupHeartbeatResponse = await self.link.request(
            ApiKey.CONSUMER_GROUP_HEARTBEAT, request, retry_for_s=self.session_timeout_ms / 2000
        )
        self._subscription_sent = True
        self._lease_from = sent_at
        self.member_epoch = response.member_epoch
        self.heartbeat_interval_s = max(response.heartbeat_interval_ms, 50) / 1000
        target = {(tp.topic, tp.partition) for tp in response.assignment}
        if target != self._owned:
            self._target = target

    async def _apply_assignment(self) -> None:
        """Between two batches of the application: let go of revoked partitions, take new ones."""
        if self._owned and time.monotonic() - self._lease_from > self.session_timeout_ms / 1000 * 0.8:
            lost = sorted(self._owned)
            log.warning("group %s: no answer from the coordinator for a session; dropping %s", self.group_id, lost)
            self.consumer.remove(lost)
            self._owned.clear()
            if self._on_lost:
                self._on_lost(lost)
            return
        target, self._target = self._target, None
        if target is None:
            return
        revoked = sorted(self._owned - target)
        added = sorted(target - self._owned)
        if revoked:
            if self.enable_auto_commit:
                try:
                    await self.commit(revoked)
                except errors.TidewayError as exc:
                    log.warning("group %s: commit before releasing %s failed: %s", self.group_id, revoked, exc)
            self.consumer.remove(revoked)
            self._owned.difference_update(revoked)
            if self._on_revoked:
                self._on_revoked(revoked)
            self._heartbeat_now.set()  # tell the coordinator at once
        if added:
            committed = await self.committed(added)
            await self.consumer.add({tp: committed[tp] if committed[tp] >= 0 else self.auto_offset_reset for tp in added})
            self._owned.update(added)
            if self._on_assigned:
                self._on_assigned(added)

    # -- reading -----------------------------------------------------------------------------

    async def getmany(self, timeout_ms: int = 1000, max_records: int | None = None) -> dict[TopicPartition, list[Record]]:
        await self._apply_assignment()
        if self.enable_auto_commit and time.monotonic() - self._last_commit >= self.auto_commit_interval_s:
            try:
                await self.commit()
            except errors.TidewayError as exc:
                log.info("group %s: auto commit failed: %s", self.group_id, exc)
        if not self._owned:
            await asyncio.sleep(min(timeout_ms / 1000, 0.05))
            return {}
        records = await self.consumer.getmany(timeout_ms, max_records)
        return {tp: batch for tp, batch in records.items() if tp in self._owned}

    async def seek(self, tp: TopicPartition, start: str | int) -> None:
        """Move an owned partition to an offset, "earliest", "latest" or "@<ms>" (a time)."""
        if tp not in self._owned:
            raise errors.NotAssignedError(f"{tp[0]}-{tp[1]} is not assigned to this member")
        await self.consumer.seek(tp, start)

    def position(self, tp: TopicPartition) -> int:
        return self.consumer.position(tp)

    # -- offsets --------------------------------------------------------------------------------

    async def commit(self, partitions: list[TopicPartition] | None = None, offsets: dict[TopicPartition, int] | None = None) -> None:
        """Commit the positions of owned partitions (or the given offsets); returns once replicated."""
        if offsets is None:
            offsets = {tp: self.consumer.position(tp) for tp in (partitions if partitions is not None else sorted(self._owned))}
        self._last_commit = time.monotonic()
        if not offsets:
            return
        await commit_offsets(self.link, offsets, member_id=self.member_id, member_epoch=self.member_epoch)

    async def committed(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        """The group's committed offsets; a read_committed member waits out a transaction committing them."""
        return await fetch_committed(self.link, partitions,
                                     require_stable=self.consumer.isolation_level == m.READ_COMMITTED)

    async def stop(self) -> None:
        """Commit (with auto commit), leave the group, close."""
        if self._stopped:
            return
        self._stopped = True
        if self._heartbeat is not None:
            await cancel_and_wait(self._heartbeat)
        if self.enable_auto_commit and self._owned:
            try:
                await self.commit()
            except errors.TidewayError as exc:
                log.warning("group %s: final commit failed: %s", self.group_id, exc)
        released = sorted(self._owned)
        self.consumer.remove(released)
        self._owned.clear()
        if released and self._on_revoked:
            self._on_revoked(released)
        try:
            await self.link.request(
                ApiKey.CONSUMER_GROUP_HEARTBEAT,
                m.ConsumerGroupHeartbeatRequest(group_id=self.group_id, member_id=self.member_id, member_epoch=-1),
                retry_for_s=5,
            )
        except errors.TidewayError as exc:
            log.info("group %s: leave failed (the session will expire): %s", self.group_id, exc)
        await self.consumer.stop()
        if self._own_client:
            await self.client.close()


async def commit_offsets(link: CoordinatorLink, offsets: dict[TopicPartition, int], *, member_id: str = "",
                         member_epoch: int = -1) -> None:
    """Commit ``offsets`` for the link's group (as a member, or outside any membership); raise the first refusal."""
    request = m.OffsetCommitRequest(
        group_id=link.group_id, member_id=member_id, member_epoch=member_epoch,
        offsets=[m.CommittedOffset(topic=t, partition=p, offset=o) for (t, p), o in offsets.items()],
    )
    response: m.OffsetCommitResponse = await link.request(ApiKey.OFFSET_COMMIT, request)
    for result in response.offsets:
        if result.error_code:
            raise errors.error_for_code(result.error_code, result.error_message)


async def fetch_committed(link: CoordinatorLink, partitions: list[TopicPartition], *,
                          require_stable: bool = False) -> dict[TopicPartition, int]:
    """The group's committed offsets (-1: none). ``require_stable``: while an open transaction commits one of
    them, wait for its outcome instead of answering the offset before it (KIP-447: a read_committed member
    that takes a partition over starts where the transaction left it, not before)."""
    request = m.OffsetFetchRequest(group_id=link.group_id, require_stable=require_stable,
                                   partitions=[m.TopicPartitionRef(topic=t, partition=p) for t, p in partitions])
    backoff = Backoff(initial_s=0.05, max_s=0.5, deadline_s=link.retry_for_s)
    while True:
        response: m.OffsetFetchResponse = await link.request(ApiKey.OFFSET_FETCH, request)
        unstable = [o for o in response.offsets if o.error_code == errors.UnstableOffsetCommitError.errno]
        if not unstable:
            return {(o.topic, o.partition): o.offset for o in response.offsets}
        if not await backoff.wait():
            raise errors.error_for_code(unstable[0].error_code, unstable[0].error_message)


async def delete_offsets(link: CoordinatorLink, partitions: list[TopicPartition]) -> None:
    """Forget the link's stream group's positions on ``partitions`` (the group goes with its last); raise the
    first refusal (GroupSubscribedToTopicError while members read the topic)."""
    request = m.OffsetDeleteRequest(group_id=link.group_id,
                                    partitions=[m.TopicPartitionRef(topic=t, partition=p) for t, p in partitions])
    response: m.OffsetDeleteResponse = await link.request(ApiKey.OFFSET_DELETE, request)
    for result in response.partitions:
        if result.error_code:
            raise errors.error_for_code(result.error_code, result.error_message)


async def describe_group(client: TidewayClient, group_id: str, group_type: str = "stream") -> m.DescribeGroupResponse:
    """Members, assignments, committed offsets and queue state of a group (``group_type``: stream or queue)."""
    link = CoordinatorLink(client, group_id, group_type=group_type)
    return await link.request(ApiKey.DESCRIBE_GROUP, m.DescribeGroupRequest(group_id=group_id, group_type=group_type))


async def timestamp_at(client: TidewayClient, topic: str, partition: int, offset: int,
                       replica_id: int = m.CONSUMER) -> int | None:
    """The timestamp of the first record at or after ``offset`` (None if there is none).

    Platform services pass ``replica_id=INSPECTOR``: their looks are not the tenant's consumption.
    """
    try:
        result = await client.fetch(topic, partition, offset, max_bytes=1, retry_for_s=0, replica_id=replica_id)
    except errors.TidewayError:
        return None
    if not result.records:
        return None
    for position, _base, _size in readable_batches(result.records, result.aborted_transactions):
        for record in decode_records(result.records, position):
            if record.offset >= offset:
                return record.timestamp_ms
    return None


TIMESTAMPS_REQUEST_BYTES_MAX = 8 << 20  # what one look's fetch at one leader may carry, over all its partitions


async def timestamps_at(client: TidewayClient, wanted: list[tuple[str, int, int]],
                        replica_id: int = m.INSPECTOR) -> dict[tuple[str, int, int], int]:
    """``timestamp_at`` for many (topic, partition, offset) at once: one fetch per leader per round, the smallest
    read each partition allows (``partition_max_bytes`` 1: the one batch holding the offset).

    The request-wide limit is generous (``TIMESTAMPS_REQUEST_BYTES_MAX``): a broker stops giving records once a
    request's answers reach it, so a limit of 1 starved every partition after the first (issue 40). Should large
    batches still exhaust it, a partition that came back without records although its log holds the offset is
    asked again in the next round (each round answers at least the first partition of each leader, so the rounds
    end). Offsets with no record (or whose leader did not answer) are left out. A partition asked at several
    offsets is asked once per offset, in rounds."""
    out: dict[tuple[str, int, int], int] = {}
    pending = sorted(set(wanted))
    missing = sorted({topic for topic, _p, _o in pending if topic not in client.topics})
    if missing:
        await client.refresh_metadata(missing)
    rounds_left = len(pending) + 1  # a bound: every round settles at least one offset
    while pending and rounds_left:
        rounds_left -= 1
        this_round: dict[tuple[str, int], int] = {}
        later = []
        for topic, partition, offset in pending:
            if (topic, partition) in this_round:
                later.append((topic, partition, offset))
            else:
                this_round[(topic, partition)] = offset
        by_leader: dict[int, list[m.FetchPartition]] = {}
        for (topic, partition), offset in this_round.items():
            try:
                leader = client.leader_for(topic, partition)
            except errors.TidewayError:
                continue
            by_leader.setdefault(leader, []).append(
                m.FetchPartition(topic=topic, partition=partition, fetch_offset=offset, partition_max_bytes=1))

        async def ask(leader: int, partitions: list[m.FetchPartition]) -> list[m.FetchPartitionResult]:
            request = m.FetchRequest(replica_id=replica_id, max_wait_ms=0, min_bytes=0, isolation_level=m.READ_COMMITTED,
                                     max_bytes=TIMESTAMPS_REQUEST_BYTES_MAX, partitions=partitions)
            try:
                return (await (await client.connection(leader)).request(ApiKey.FETCH, request)).partitions
            except errors.TidewayError:
                return []

        for results in await asyncio.gather(*(ask(leader, parts) for leader, parts in by_leader.items())):
            for result in results:
                offset = this_round.get((result.topic, result.partition))
                if result.error_code or offset is None:
                    continue
                if not result.records:
                    if result.high_watermark > offset:  # starved by the request's limit: ask again
                        later.append((result.topic, result.partition, offset))
                    continue
                for position, _base, _size in readable_batches(result.records, result.aborted_transactions):
                    stamp = next((r.timestamp_ms for r in decode_records(result.records, position) if r.offset >= offset), None)
                    if stamp is not None:
                        out[(result.topic, result.partition, offset)] = stamp
                        break
        pending = sorted(later)
    return out


async def list_groups(client: TidewayClient, topic: str | None = None) -> list[tuple[str, str]]:
    """(group id, type) of every group (with a position on ``topic``), asked of every broker (each coordinates some)."""
    if not client.brokers:
        await client.refresh_metadata()
    found: set[tuple[str, str]] = set()
    for node_id in list(client.brokers):
        try:
            connection = await client.connection(node_id)
            response: m.ListGroupsResponse = await connection.request(ApiKey.LIST_GROUPS, m.ListGroupsRequest(topic=topic))
        except (errors.ConnectionClosedError, errors.ClientTimeoutError) as exc:
            log.info("listing groups: broker %d did not answer (%s)", node_id, exc)
            continue
        found.update((g.group_id, g.group_type) for g in response.groups)
    return sorted(found)


async def group_positions(client: TidewayClient, topic: str | None) -> list[m.ListedGroup]:
    """Every group with a position on ``topic`` (None: on any topic), with its member count and positions there: one
    request per broker."""
    if not client.brokers:
        await client.refresh_metadata()
    found: dict[str, m.ListedGroup] = {}
    for node_id in list(client.brokers):
        try:
            connection = await client.connection(node_id)
            response: m.ListGroupsResponse = await connection.request(
                ApiKey.LIST_GROUPS, m.ListGroupsRequest(topic=topic, with_positions=True))
        except (errors.ConnectionClosedError, errors.ClientTimeoutError) as exc:
            log.info("listing groups: broker %d did not answer (%s)", node_id, exc)
            continue
        for group in response.groups:
            found.setdefault(group.group_id, group)  # one coordinator holds a group; after a move, the first answer
    return sorted(found.values(), key=lambda g: g.group_id)


async def group_lag(client: TidewayClient, group_id: str, group_type: str = "stream") -> list[dict]:
    """Per partition: the group's position, the log end, the lag and the age of the oldest unconsumed record.

    For a stream group the position is the committed offset; for a queue
    group it is the oldest record not yet accepted or dead-lettered (on a
    partition it has not received from yet, the oldest record there).
    """
    described = await describe_group(client, group_id, group_type)
    positions: dict[TopicPartition, int] = {}
    if described.group_type == "queue":
        for share in described.share_partitions:
            positions[(share.topic, share.partition)] = share.start_offset
        # A partition the group has not received from yet: it starts at the oldest record there.
        for topic in {t for t, _ in positions}:
            for partition in range(len(await client.partitions_for(topic))):
                if (topic, partition) not in positions:
                    positions[(topic, partition)], _ = await client.list_offset(topic, partition, m.EARLIEST_TIMESTAMP)
    else:
        for committed in described.offsets:
            positions[(committed.topic, committed.partition)] = committed.offset
    rows = []
    now = int(time.time() * 1000)
    for (topic, partition), position in sorted(positions.items()):
        try:
            end, _ = await client.list_offset(topic, partition, m.LATEST_TIMESTAMP)
        except errors.UnknownTopicOrPartitionError:
            continue
        lag = max(0, end - position)
        oldest = await timestamp_at(client, topic, partition, position) if lag else None
        rows.append(
            {
                "topic": topic, "partition": partition, "position": position, "log_end": end, "lag": lag,
                "oldest_age_ms": None if oldest is None else max(0, now - oldest),
            }
        )
    return rows
