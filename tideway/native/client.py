"""The cluster client: bootstrap, metadata, connections per broker, topic admin.

Every connection authenticates when it opens: with ``credentials``, else with
``api_key`` (a tenant API key or a service key), else with ``$TIDEWAY_API_KEY``.
A tenant key sees and names only its tenant's queues, by the tenant's own names.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection

from tideway.native.conn import Connection, connect
from tideway.native.credentials import Credentials, credentials_for
from tideway.protocol import errors
from tideway.protocol import messages as m
from tideway.protocol.messages import ApiKey
from tideway.retry import Backoff

__all__ = ["TidewayClient", "parse_bootstrap"]

log = logging.getLogger(__name__)

# A read (fetch, list offsets, a queue's acquire) not answered this long after the wait it asked for is given up
# and asked again after a metadata refresh: a frozen leader answers nothing, and its partitions' new leader is known
# within the controller's session timeout (issue 40). A false alarm costs one more read.
READ_ANSWER_SLACK_S = 2.0
HEDGE_AFTER_S = 0.5  # a metadata or coordinator lookup not answered this soon is asked of the next broker too


def parse_bootstrap(bootstrap: str | list[str]) -> list[tuple[str, int]]:
    """'h1:9401,h2:9401' or a list of 'host:port' -> [(host, port), ...]."""
    items = bootstrap.split(",") if isinstance(bootstrap, str) else bootstrap
    out = []
    for item in items:
        item = item.strip()
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not port.isdigit():
            raise ValueError(f"bootstrap address {item!r} is not host:port")
        out.append((host or "127.0.0.1", int(port)))
    if not out:
        raise ValueError("no bootstrap address given")
    return out


class TidewayClient:
    """Knows the cluster's brokers and partition leaders, and holds one connection per broker."""

    def __init__(
        self,
        bootstrap: str | list[str],
        *,
        request_timeout_ms: int = 30_000,
        metadata_timeout_ms: int = 5_000,
        api_key: str | None = None,
        credentials: Credentials | None = None,
        ssl_context=None,
    ) -> None:
        self.bootstrap = parse_bootstrap(bootstrap)
        self.credentials = credentials_for(api_key, credentials)
        self.ssl_context = ssl_context
        self.request_timeout_s = request_timeout_ms / 1000
        self.metadata_timeout_s = metadata_timeout_ms / 1000
        self._last_answered: int | tuple[str, int] | None = None
        self.brokers: dict[int, tuple[str, int]] = {}
        self.topics: dict[str, list[m.PartitionInfo]] = {}
        self._connections: dict[int | tuple[str, int], Connection] = {}
        self._connecting: dict[int | tuple[str, int], asyncio.Future] = {}
        self._metadata_lock = asyncio.Lock()

    async def start(self) -> None:
        await self.refresh_metadata()

    async def close(self) -> None:
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()

    async def __aenter__(self) -> TidewayClient:
        await self.start()
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.close()

    # -- connections ------------------------------------------------------------

    def open_connection(self, node_id: int) -> Connection | None:
        """The connection to broker ``node_id`` if one is open now (no waiting, no connecting)."""
        connection = self._connections.get(node_id)
        return connection if connection is not None and not connection.closed else None

    async def connection(self, node_id: int, *, coordination: bool = False) -> Connection:
        """The connection to broker ``node_id``, (re)opened when needed.

        ``coordination``: a second connection to it, for stream groups' heartbeats
        and commits (Kafka's clients do the same), so they never queue behind
        the long-polling fetches of many consumers sharing this client: the
        broker reads at most so many requests of one connection at a time.
        """
        if node_id not in self.brokers:
            await self.refresh_metadata()
            if node_id not in self.brokers:
                raise errors.LeaderNotAvailableError(f"broker {node_id} is not in the cluster metadata")
        return await self._connection_to(("coordination", node_id) if coordination else node_id, *self.brokers[node_id])

    async def _connection_to(self, key: int | tuple[str, int] | tuple[str, str, int], host: str, port: int) -> Connection:
        connection = self._connections.get(key)
        if connection is not None and not connection.closed:
            return connection
        pending = self._connecting.get(key)
        if pending is None:
            pending = asyncio.ensure_future(
                connect(host, port, self.request_timeout_s, credentials=self.credentials, ssl_context=self.ssl_context))
            self._connecting[key] = pending
            pending.add_done_callback(lambda _f: self._connecting.pop(key, None))
        connection = await asyncio.shield(pending)
        self._connections[key] = connection
        return connection

    async def request_any(self, api: ApiKey, body, *, timeout_s: float | None = None,
                          hedge_after_s: float | None = None, avoid: Collection[int] = ()) -> object:
        """Send to some live broker: known brokers first, then bootstrap addresses.

        A broker that refuses the connection, drops it, cannot check its key
        right now or does not answer within ``timeout_s`` (default: the
        metadata timeout, short, because a frozen broker accepts connections
        but never answers) is skipped. ``hedge_after_s`` (requests that only
        read: metadata, coordinator lookups): when a broker has not answered
        that soon, the next one is asked too, without giving up on the first,
        and the first answer wins, so a frozen broker costs a lookup
        ``hedge_after_s`` rather than the whole timeout (issue 40).
        ``avoid``: brokers asked last (a leader that failed or stalled: cut off
        from the controller, it still believes it leads; issue 45).
        """
        timeout_s = self.metadata_timeout_s if timeout_s is None else timeout_s
        candidates: list[tuple[int | tuple[str, int], str, int]] = [
            (node, host, port) for node, (host, port) in self.brokers.items()
        ]
        candidates += [((host, port), host, port) for host, port in self.bootstrap]
        # Start with the broker that answered last time, unless it is one to avoid (by its id or, for a bootstrap
        # address, by the address it has).
        avoided = {self.brokers[node] for node in avoid if node in self.brokers}
        candidates.sort(key=lambda c: (c[0] in avoid or (c[1], c[2]) in avoided, c[0] != self._last_answered))
        last_error: Exception | None = None
        asking: set[asyncio.Task] = set()
        try:
            for key, host, port in candidates:
                asking.add(asyncio.ensure_future(self._ask(key, host, port, api, body, timeout_s)))
                while asking:
                    done, asking = await asyncio.wait(asking, timeout=hedge_after_s, return_when=asyncio.FIRST_COMPLETED)
                    if not done:
                        break  # none answered yet: ask the next one as well
                    answered, last_error = self._first_answer(done, last_error)
                    if answered is not None:
                        return answered
            while asking:  # every candidate asked: the ones still out may yet answer
                done, asking = await asyncio.wait(asking, return_when=asyncio.FIRST_COMPLETED)
                answered, last_error = self._first_answer(done, last_error)
                if answered is not None:
                    return answered
        finally:
            for task in asking:
                task.cancel()
        raise errors.ConnectionClosedError(f"no broker answered (tried {len(candidates)} addresses)") from last_error

    def _first_answer(self, done: set[asyncio.Task], last_error: Exception | None) -> tuple[object, Exception | None]:
        """(an answer among the finished ``done``, or None; the last error seen)."""
        for task in done:
            answered_by, response, error = task.result()
            if error is None:
                self._last_answered = answered_by
                return response, last_error
            last_error = error
        return None, last_error

    async def _ask(self, key: int | tuple[str, int], host: str, port: int, api: ApiKey, body, timeout_s: float):
        """(key, answer, None) from one broker, or (key, None, the error) when it cannot answer (see request_any)."""
        try:
            connection = await self._connection_to(key, host, port)
            return key, await connection.request(api, body, timeout_s=timeout_s), None
        except (errors.ConnectionClosedError, errors.ClientTimeoutError, errors.AuthenticationUnavailableError) as exc:
            stale = self._connections.pop(key, None)
            if stale is not None:
                stale.close()
            return key, None, exc

    # -- metadata -----------------------------------------------------------------

    async def refresh_metadata(self, topics: list[str] | None = None, *, avoid: Collection[int] = ()) -> None:
        """Metadata from some broker (``avoid``: ask those last; see request_any)."""
        async with self._metadata_lock:
            response: m.MetadataResponse = await self.request_any(  # type: ignore[assignment]
                ApiKey.METADATA, m.MetadataRequest(topics=topics), hedge_after_s=HEDGE_AFTER_S, avoid=avoid)
            self.brokers = {b.node_id: (b.host, b.port) for b in response.brokers}
            for topic in response.topics:
                if topic.error_code == 0:
                    self.topics[topic.name] = sorted(topic.partitions, key=lambda p: p.partition)
                elif topic.error_code == errors.UnknownTopicOrPartitionError.errno:
                    self.topics.pop(topic.name, None)
            if topics is None:
                known = {t.name for t in response.topics}
                for name in list(self.topics):
                    if name not in known:
                        del self.topics[name]

    async def partitions_for(self, topic: str) -> list[m.PartitionInfo]:
        """The partitions of ``topic`` (refreshing metadata once if unknown)."""
        if topic not in self.topics:
            await self.refresh_metadata([topic])
        try:
            return self.topics[topic]
        except KeyError:
            raise errors.UnknownTopicOrPartitionError(f"topic {topic!r} does not exist") from None

    def leader_for(self, topic: str, partition: int) -> int:
        partitions = self.topics.get(topic)
        if partitions is None or partition >= len(partitions):
            raise errors.UnknownTopicOrPartitionError(f"no metadata for {topic}-{partition}")
        leader = partitions[partition].leader
        if leader < 0:
            raise errors.LeaderNotAvailableError(f"{topic}-{partition} has no leader")
        return leader

    # -- reads ------------------------------------------------------------------------

    def read_timeout_s(self, wait_s: float = 0.0) -> float:
        """How long a read that may wait ``wait_s`` for data is given to answer (READ_ANSWER_SLACK_S)."""
        return wait_s + min(self.request_timeout_s, READ_ANSWER_SLACK_S)

    async def fetch(self, topic: str, partition: int, offset: int, *, max_bytes: int = 1 << 20, wait_ms: int = 0,
                    retry_for_s: float | None = None, replica_id: int = m.CONSUMER, answers_max: int = 1,
                    on_answer: Callable[[m.FetchPartitionResult], None] | None = None,
                    isolation_level: int = m.READ_COMMITTED) -> m.FetchPartitionResult:
        """Whole batches of one partition from ``offset``, read at its leader.

        Waits up to ``wait_ms`` for data when there is none yet. While the
        leader moves (not leader, no leader, a broken connection, a damaged
        replica) it refreshes metadata and tries again, with backoff, for up to
        ``retry_for_s`` (default: the request timeout; 0: once). Other errors,
        such as an offset outside the log, are raised at once. ``replica_id``
        QUEUE_READER is for brokers reading for a queue group (not metered).

        A fetch that waited with ``answers_max`` > 1 streams: it answers each time records come,
        each answer starting where the one before ended, for up to ``wait_ms`` and ``max_bytes``
        in all (``max_bytes`` is also one answer's limit). ``on_answer`` gets every good answer's
        partition result as it is read, the last one included, which this also returns.

        ``isolation_level`` READ_COMMITTED (the default) stops before any transaction still open and names the
        aborted ones among the records (``tideway.record.markers.readable_batches`` drops them and the markers).
        """
        request = m.FetchRequest(replica_id=replica_id, max_wait_ms=wait_ms, min_bytes=1 if wait_ms > 0 else 0, max_bytes=max_bytes,
                                 answers_max=answers_max, isolation_level=isolation_level, partitions=[
            m.FetchPartition(topic=topic, partition=partition, fetch_offset=offset, partition_max_bytes=max_bytes)])
        given = None if on_answer is None else _first_partition(on_answer)
        response: m.FetchResponse = await self._at_leader(topic, partition, ApiKey.FETCH, request, retry_for_s=retry_for_s,
                                                          extra_timeout_s=wait_ms / 1000, on_answer=given)
        return response.partitions[0]

    # -- admin ------------------------------------------------------------------------

    async def create_topic(
        self, name: str, *, partitions: int = 1, replication_factor: int = 1, configs: dict[str, str] | None = None
    ) -> None:
        request = m.CreateTopicsRequest(
            topics=[m.NewTopic(name=name, partitions=partitions, replication_factor=replication_factor, configs=configs or {})]
        )
        response: m.CreateTopicsResponse = await self.request_any(ApiKey.CREATE_TOPICS, request, timeout_s=self.request_timeout_s)  # type: ignore[assignment]
        _raise_first(response.topics)
        await self.refresh_metadata([name])

    async def create_partitions(self, name: str, count: int) -> None:
        """Grow topic ``name`` to ``count`` partitions (they never shrink)."""
        await self.request_any(ApiKey.CREATE_PARTITIONS, m.CreatePartitionsRequest(topic=name, count=count), timeout_s=self.request_timeout_s)
        await self.refresh_metadata([name])

    async def alter_configs(self, name: str, *, set: dict[str, str] | None = None, delete: list[str] | None = None) -> dict[str, str]:
        """Change topic ``name``'s settings (``delete`` resets to defaults); returns all its settings after."""
        request = m.AlterConfigsRequest(topic=name, set=set or {}, delete=delete or [])
        response: m.AlterConfigsResponse = await self.request_any(ApiKey.ALTER_CONFIGS, request, timeout_s=self.request_timeout_s)  # type: ignore[assignment]
        return response.configs

    async def delete_topic(self, name: str) -> None:
        response: m.DeleteTopicsResponse = await self.request_any(ApiKey.DELETE_TOPICS, m.DeleteTopicsRequest(names=[name]), timeout_s=self.request_timeout_s)  # type: ignore[assignment]
        _raise_first(response.topics)
        self.topics.pop(name, None)

    async def list_topics(self) -> list[str]:
        await self.refresh_metadata()
        return sorted(self.topics)

    async def describe_topics(self, names: list[str] | None = None) -> list[m.TopicDescription]:
        response: m.DescribeTopicsResponse = await self.request_any(ApiKey.DESCRIBE_TOPICS, m.DescribeTopicsRequest(names=names))  # type: ignore[assignment]
        _raise_first(response.topics)
        return response.topics

    async def list_offset(self, topic: str, partition: int, timestamp: int, *,
                          retry_for_s: float | None = None) -> tuple[int, int]:
        """(offset, timestamp) for LATEST_TIMESTAMP, EARLIEST_TIMESTAMP or a time in ms.

        Asked of the partition's leader; retried like ``fetch`` while the leader moves.
        """
        request = m.ListOffsetsRequest(partitions=[m.ListOffsetsPartition(topic=topic, partition=partition, timestamp=timestamp)])
        (result,) = (await self._at_leader(topic, partition, ApiKey.LIST_OFFSETS, request, retry_for_s=retry_for_s)).partitions
        return result.offset, result.timestamp

    async def delete_records(self, topic: str, partition: int, offset: int = -1, *, timeout_ms: int = 30_000,
                             retry_for_s: float | None = None) -> int:
        """Delete the records of ``topic``-``partition`` below ``offset`` (-1: every record there is, up to the
        high watermark); return the partition's log start offset now. Needs the manage scope. Asked of the leader,
        which answers once every in-sync replica has deleted them; retried while the leader moves (deleting
        again is harmless)."""
        request = m.DeleteRecordsRequest(timeout_ms=timeout_ms, partitions=[
            m.DeleteRecordsPartition(topic=topic, partition=partition, offset=offset)])
        (result,) = (await self._at_leader(topic, partition, ApiKey.DELETE_RECORDS, request,
                                           retry_for_s=retry_for_s, extra_timeout_s=timeout_ms / 1000)).partitions
        return result.low_watermark

    async def list_offsets(self, wanted: list[tuple[str, int, int]]) -> dict[tuple[str, int], tuple[int, int]]:
        """``list_offset`` for many partitions at once: one request per leader (a sampler's look at thousands of
        partitions costs a request per broker). {(topic, partition): (offset, timestamp)}; a partition whose
        leader did not answer (it is moving) is asked alone, with ``list_offset``'s retries."""
        missing = sorted({topic for topic, _p, _t in wanted if topic not in self.topics})
        if missing:
            await self.refresh_metadata(missing)
        by_leader: dict[int, list[m.ListOffsetsPartition]] = {}
        alone = []
        for topic, partition, timestamp in wanted:
            try:
                leader = self.leader_for(topic, partition)
            except errors.TidewayError:
                alone.append((topic, partition, timestamp))
                continue
            by_leader.setdefault(leader, []).append(m.ListOffsetsPartition(topic=topic, partition=partition, timestamp=timestamp))

        async def ask(leader: int, partitions: list[m.ListOffsetsPartition]) -> list:
            try:
                connection = await self.connection(leader)
                response = await connection.request(ApiKey.LIST_OFFSETS, m.ListOffsetsRequest(partitions=partitions))
                return response.partitions
            except errors.TidewayError:
                return [m.ListOffsetsPartitionResult(topic=p.topic, partition=p.partition, error_code=-1) for p in partitions]

        out: dict[tuple[str, int], tuple[int, int]] = {}
        asked = {(p.topic, p.partition): p.timestamp for partitions in by_leader.values() for p in partitions}
        for results in await asyncio.gather(*(ask(leader, partitions) for leader, partitions in by_leader.items())):
            for result in results:
                if result.error_code:
                    alone.append((result.topic, result.partition, asked[(result.topic, result.partition)]))
                else:
                    out[(result.topic, result.partition)] = (result.offset, result.timestamp)
        for topic, partition, timestamp in alone:
            try:
                out[(topic, partition)] = await self.list_offset(topic, partition, timestamp)
            except errors.UnknownTopicOrPartitionError:
                continue  # deleted meanwhile
        return out

    async def _at_leader(self, topic: str, partition: int, api: ApiKey, request, *, retry_for_s: float | None,
                         extra_timeout_s: float = 0.0, on_answer: Callable[..., None] | None = None):
        """``request`` answered by the leader of ``topic``-``partition`` (its one partition result checked).

        While the leader moves (not leader, no leader, a broken connection, a
        damaged replica) it refreshes metadata and tries again, with backoff, for
        up to ``retry_for_s`` (default: the request timeout; 0: once). Other
        errors are raised at once.
        """
        backoff = Backoff(initial_s=0.05, max_s=1.0,
                          deadline_s=self.request_timeout_s if retry_for_s is None else retry_for_s)
        await self.partitions_for(topic)  # UnknownTopicOrPartitionError at once if the topic does not exist
        while True:
            try:
                connection = await self.connection(self.leader_for(topic, partition))
                response = await connection.request(api, request, timeout_s=self.read_timeout_s(extra_timeout_s),
                                                    on_answer=on_answer)
                (result,) = response.partitions
                if result.error_code:
                    raise errors.error_for_code(result.error_code, result.error_message)
                return response
            except errors.TidewayError as exc:
                if not exc.retriable:
                    raise
                try:
                    await self.refresh_metadata([topic])
                except errors.TidewayError:
                    pass
                if topic not in self.topics:
                    raise errors.UnknownTopicOrPartitionError(f"topic {topic!r} does not exist") from None
                if not await backoff.wait():
                    raise


def _first_partition(on_answer: Callable[[m.FetchPartitionResult], None]) -> Callable[[m.FetchResponse], None]:
    """Gives a fetch answer's one partition result to ``on_answer``; not one with an error (the fetch raises that)."""
    def given(response: m.FetchResponse) -> None:
        (result,) = response.partitions
        if not result.error_code:
            on_answer(result)
    return given


def _raise_first(results) -> None:
    for result in results:
        if result.error_code:
            raise errors.error_for_code(result.error_code, result.error_message)
