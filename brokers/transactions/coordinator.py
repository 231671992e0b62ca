"""The transaction coordinator (Kafka's design, KIP-98): transactional id -> producer id and epoch, the
partitions of the open transaction, and its state.

Every transactional id belongs to one partition of ``__transaction_state`` (a StateTopic); the broker that
leads it coordinates the id. Each change of a transaction is written there (acks=all) before it is answered,
so a coordinator that takes over after a failover finishes what the old one decided::

    Empty -> Ongoing (partitions added) -> PrepareCommit | PrepareAbort (EndTxn, a timeout, a new instance)
          -> CompleteCommit | CompleteAbort (every partition has its marker) -> Ongoing (the next one) ...

Ending a transaction: the decision (Prepare*) is written first and answered; then the markers go to every
partition's leader (WRITE_TXN_MARKERS, retried until each has it) and Complete* is written. Until then the
producer's next transaction waits (CONCURRENT_TRANSACTIONS, which clients retry).

Fencing: InitProducerId with a transactional id bumps the epoch (aborting a transaction the previous instance
left open), so the previous instance's requests are refused (PRODUCER_FENCED) here, and its writes at the
partitions once their markers carry the new epoch. A transaction open longer than its timeout is aborted and
the epoch bumped the same way.

Record keys and values (msgpack): ["txn", transactional id] -> {"pid", "epoch", "timeout", "state",
"partitions": [[topic, partition], ...], "started", "updated"}.

Ownership: the broker's event-loop thread.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tideway_server.brokers.coordination.state_topic import StateTopic, partition_for_key

from tideway.aio import cancel_and_wait
from tideway.native.group import CoordinatorLink
from tideway.protocol import errors
from tideway.protocol import messages as m
from tideway.protocol.messages import ApiKey
from tideway.retry import Backoff

if TYPE_CHECKING:
    from tideway_server.brokers.server.metadata_cache import MetadataCache
    from tideway_server.brokers.server.replica_manager import ReplicaManager

    from tideway.native.client import TidewayClient

__all__ = ["TXN_TOPIC", "TransactionCoordinator", "TxnState"]

log = logging.getLogger(__name__)

TXN_TOPIC = "__transaction_state"
TXN_TOPIC_SETTINGS = {
    "cleanup.policy": "compact",
    "segment.bytes": str(16 << 20),
    "segment.ms": str(10 * 60 * 1000),
    "retention.ms": "-1",
    "max.message.bytes": str(1 << 20),
}
TRANSACTIONAL_ID_MAX = 255
TIMEOUT_MS_RANGE = (1_000, 15 * 60 * 1000)  # Kafka's transaction.max.timeout.ms is 15 minutes
PARTITIONS_PER_TXN_MAX = 10_000
EPOCH_MAX = 32_766  # int16; past it the id gets a new producer id at epoch 0
SWEEP_INTERVAL_S = 1.0
COMPLETION_WAIT_S = 5.0  # how long a request waits for the previous transaction's markers before CONCURRENT_TRANSACTIONS


class TxnState(enum.Enum):
    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"


_PREPARED = (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)
_ENDED = (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)


@dataclass
class Txn:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    partitions: set[tuple[str, int]] = field(default_factory=set)
    started_ms: int = -1
    updated_ms: int = 0

    def value(self) -> dict:
        return {"pid": self.producer_id, "epoch": self.producer_epoch, "timeout": self.timeout_ms,
                "state": self.state.value, "partitions": sorted([t, p] for t, p in self.partitions),
                "started": self.started_ms, "updated": self.updated_ms}

    @classmethod
    def from_value(cls, transactional_id: str, value: dict) -> Txn:
        return cls(transactional_id, value["pid"], value["epoch"], value["timeout"], TxnState(value["state"]),
                   {(t, p) for t, p in value["partitions"]}, value["started"], value["updated"])

    def describe(self) -> m.TransactionDescription:
        return m.TransactionDescription(
            transactional_id=self.transactional_id, state=self.state.value, producer_id=self.producer_id,
            producer_epoch=self.producer_epoch, timeout_ms=self.timeout_ms,
            started_ms=self.started_ms if self.state is TxnState.ONGOING or self.state in _PREPARED else -1,
            partitions=[m.TopicPartitionRef(topic=t, partition=p) for t, p in sorted(self.partitions)])


def _now_ms() -> int:
    return int(time.time() * 1000)


def _check_transactional_id(transactional_id: str) -> None:
    if not transactional_id or len(transactional_id) > TRANSACTIONAL_ID_MAX or not transactional_id.isprintable():
        raise errors.InvalidRequestError(f"a transactional id is 1-{TRANSACTIONAL_ID_MAX} printable characters")


class TransactionCoordinator:
    def __init__(self, *, broker_id: int, replicas: ReplicaManager, metadata: MetadataCache,
                 create_topics: Callable[[m.CreateTopicsRequest], Awaitable[m.CreateTopicsResponse]],
                 peer_client: Callable[[], TidewayClient], partitions: int = 8,
                 idle_id_expiry_ms: int = 7 * 24 * 3600 * 1000) -> None:
        self.broker_id = broker_id
        # A transactional id with no transaction for this long is forgotten (Kafka's transactional.id.expiration.ms):
        # short-lived ids (the gateway's, a test's) do not pile up in __transaction_state; a next init starts afresh.
        self.idle_id_expiry_ms = idle_id_expiry_ms
        self.metadata = metadata
        self.state = StateTopic(TXN_TOPIC, partitions=partitions, settings=TXN_TOPIC_SETTINGS, broker_id=broker_id,
                                replicas=replicas, metadata=metadata, create_topics=create_topics,
                                on_load=self._load, on_unload=self._unload, what="transactional id")
        self.txns: dict[str, Txn] = {}
        self.offsets_topic: StateTopic | None = None  # the group coordinator's (AddOffsetsToTxn marks its partitions)
        # This broker's WRITE_TXN_MARKERS handler (the replica manager's), for the partitions it leads itself.
        self.write_local_markers: Callable[[m.WriteTxnMarkersRequest], Awaitable[m.WriteTxnMarkersResponse]] | None = None
        self._peer_client = peer_client
        self._client: TidewayClient | None = None
        self._completing: dict[str, asyncio.Task] = {}  # transactional id -> its markers being written
        self._locks: dict[str, asyncio.Lock] = {}  # see _lock
        self._sweeper: asyncio.Task | None = None

    def start(self) -> None:
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep_forever())

    async def stop(self) -> None:
        await cancel_and_wait(*(t for t in (self._sweeper,) if t is not None), *self._completing.values())
        await self.state.stop()
        if self._client is not None:
            await self._client.close()

    def on_roles_changed(self) -> None:
        self.state.on_roles_changed()

    async def find_coordinator(self, request: m.FindCoordinatorRequest, session) -> m.FindCoordinatorResponse:
        _check_transactional_id(request.group_id)
        return self.state.coordinator_of(request.group_id, session.listener)

    # -- state ---------------------------------------------------------------------------------------

    def _load(self, index: int, latest: dict[tuple, object], _pending: dict[int, dict[tuple, object]]) -> None:
        resumed = 0
        for key, value in latest.items():
            if value is None or key[0] != "txn":
                continue
            txn = Txn.from_value(key[1], value)
            self.txns[txn.transactional_id] = txn
            if txn.state in _PREPARED:  # decided by the previous coordinator: its markers may be missing
                self._complete_later(txn)
                resumed += 1
        log.info("%s-%d: %d transactional ids, %d transactions to complete", TXN_TOPIC, index,
                 sum(1 for t in self.txns if self._index(t) == index), resumed)

    def _unload(self, index: int) -> None:
        for transactional_id in [t for t in self.txns if self._index(t) == index]:
            del self.txns[transactional_id]
            self._locks.pop(transactional_id, None)
            task = self._completing.pop(transactional_id, None)
            if task is not None:
                task.cancel()

    def _index(self, transactional_id: str) -> int:
        return partition_for_key(transactional_id, self.state.partition_count() or self.state.partitions)

    async def _write(self, index: int, txn: Txn, new: Txn) -> None:
        """Make ``new`` the transaction's state once every replica of its state partition has it."""
        new.updated_ms = _now_ms()
        await self.state.write(index, [(["txn", new.transactional_id], new.value())])
        if self.txns.get(txn.transactional_id) is txn:
            self.txns[new.transactional_id] = new

    def _checked(self, transactional_id: str, producer_id: int, producer_epoch: int) -> tuple[int, Txn]:
        _check_transactional_id(transactional_id)
        index = self.state.check(transactional_id)
        txn = self.txns.get(transactional_id)
        if txn is None or txn.producer_id != producer_id:
            raise errors.InvalidProducerIdMappingError(
                f"producer {producer_id} is not the one of transactional id {transactional_id!r}: init it first")
        if producer_epoch < txn.producer_epoch:
            raise errors.ProducerFencedError(
                f"producer epoch {producer_epoch} of {transactional_id!r} was fenced by epoch {txn.producer_epoch} "
                "(a newer instance of this producer, or its transaction timed out)")
        if producer_epoch > txn.producer_epoch:
            raise errors.InvalidProducerEpochError(f"epoch {producer_epoch} is newer than {txn.producer_epoch}")
        return index, txn

    # -- requests ------------------------------------------------------------------------------------

    def _lock(self, transactional_id: str) -> asyncio.Lock:
        """Held by each change of one transactional id's state, from reading it to writing the next (a producer
        sends AddPartitionsToTxn and AddOffsetsToTxn at once: two changes made from the same state lost one)."""
        lock = self._locks.get(transactional_id)
        if lock is None:
            lock = self._locks[transactional_id] = asyncio.Lock()
        return lock

    async def init_producer_id(self, request: m.InitProducerIdRequest) -> m.InitProducerIdResponse:
        """A producer id and epoch for a transactional id: new, or the next epoch (fencing the previous instance,
        whose open transaction is aborted first)."""
        _check_transactional_id(request.transactional_id)
        await self._previous_completed(request.transactional_id)
        async with self._lock(request.transactional_id):
            return await self._init_producer_id(request)

    async def _init_producer_id(self, request: m.InitProducerIdRequest) -> m.InitProducerIdResponse:
        transactional_id = request.transactional_id
        if not TIMEOUT_MS_RANGE[0] <= request.transaction_timeout_ms <= TIMEOUT_MS_RANGE[1]:
            raise errors.InvalidTransactionTimeoutError(
                f"transaction timeout {request.transaction_timeout_ms} ms outside {TIMEOUT_MS_RANGE[0]}-"
                f"{TIMEOUT_MS_RANGE[1]} ms")
        index = self.state.check(transactional_id)
        txn = self.txns.get(transactional_id)
        if txn is not None and txn.state in _PREPARED:
            raise errors.ConcurrentTransactionsError(f"the last transaction of {transactional_id!r} is being completed")
        if txn is not None and txn.state is TxnState.ONGOING:
            await self._abort(index, txn, why="a new instance of its producer started")
            raise errors.ConcurrentTransactionsError(
                f"the open transaction of {transactional_id!r} is being aborted: ask again")
        if txn is None or txn.producer_epoch >= EPOCH_MAX:
            new = Txn(transactional_id, secrets.randbits(62), 0, request.transaction_timeout_ms)
        else:
            new = Txn(transactional_id, txn.producer_id, txn.producer_epoch + 1, request.transaction_timeout_ms)
        await self._write(index, txn if txn is not None else new, new)
        self.txns[transactional_id] = new
        log.info("transactional id %s: producer %d epoch %d", transactional_id, new.producer_id, new.producer_epoch)
        return m.InitProducerIdResponse(producer_id=new.producer_id, producer_epoch=new.producer_epoch)

    async def add_partitions(self, request: m.AddPartitionsToTxnRequest) -> m.AddPartitionsToTxnResponse:
        if request.verify_only:
            _index, txn = self._checked(request.transactional_id, request.producer_id, request.producer_epoch)
            return m.AddPartitionsToTxnResponse(results=self._verified(txn, request.partitions))
        _check_transactional_id(request.transactional_id)
        await self._previous_completed(request.transactional_id)
        async with self._lock(request.transactional_id):
            return await self._add_partitions(request)

    async def _previous_completed(self, transactional_id: str) -> None:
        """Wait (a while) for the markers of the id's previous transaction, if they are being written here: the
        producer's next transaction starts as soon as they are, instead of backing off after a
        CONCURRENT_TRANSACTIONS answer (a transaction of 100 messages took 15 ms, most of it that back-off)."""
        completing = self._completing.get(transactional_id)
        if completing is not None:
            await asyncio.wait({completing}, timeout=COMPLETION_WAIT_S)

    async def _add_partitions(self, request: m.AddPartitionsToTxnRequest) -> m.AddPartitionsToTxnResponse:
        index, txn = self._checked(request.transactional_id, request.producer_id, request.producer_epoch)
        if txn.state in _PREPARED:
            raise errors.ConcurrentTransactionsError(f"the last transaction of {txn.transactional_id!r} is being completed")
        wanted = {(ref.topic, ref.partition) for ref in request.partitions}
        results, unknown = [], set()
        for topic, partition in sorted(wanted):
            count = self.metadata.partition_count(topic)
            if count is None or not 0 <= partition < count:
                unknown.add((topic, partition))
        ongoing = txn.state is TxnState.ONGOING
        partitions = (txn.partitions if ongoing else set()) | (wanted - unknown)
        if len(partitions) > PARTITIONS_PER_TXN_MAX:
            raise errors.InvalidRequestError(f"a transaction writes to at most {PARTITIONS_PER_TXN_MAX} partitions")
        if not unknown and (not ongoing or not wanted <= txn.partitions):
            new = Txn(txn.transactional_id, txn.producer_id, txn.producer_epoch, txn.timeout_ms, TxnState.ONGOING,
                      partitions, txn.started_ms if ongoing else _now_ms())
            await self._write(index, txn, new)
        for topic, partition in sorted(wanted):
            result = m.PartitionError(topic=topic, partition=partition)
            if (topic, partition) in unknown:
                result.error_code = errors.UnknownTopicOrPartitionError.errno
                result.error_message = f"{topic}-{partition} does not exist"
            elif unknown:  # Kafka's answer: nothing is added when one is wrong
                result.error_code = errors.OperationNotAttemptedError.errno
                result.error_message = "another partition of the request does not exist"
            results.append(result)
        return m.AddPartitionsToTxnResponse(results=results)

    async def add_offsets(self, request: m.AddOffsetsToTxnRequest) -> m.AddOffsetsToTxnResponse:
        """The group's offsets will be committed in this transaction: its partition of the offsets topic gets the
        transaction's marker too (which makes them count, or drops them)."""
        offsets = self.offsets_topic
        count = offsets.partition_count() if offsets is not None else None
        if count is None:
            if offsets is not None:
                offsets.ensure_created()
            raise errors.CoordinatorNotAvailableError("the groups' offsets topic is being created: ask again")
        await self.add_partitions(m.AddPartitionsToTxnRequest(
            transactional_id=request.transactional_id, producer_id=request.producer_id,
            producer_epoch=request.producer_epoch,
            partitions=[m.TopicPartitionRef(topic=offsets.name, partition=partition_for_key(request.group_id, count))]))
        return m.AddOffsetsToTxnResponse()

    @staticmethod
    def _verified(txn: Txn, partitions: list[m.TopicPartitionRef]) -> list[m.PartitionError]:
        results = []
        for ref in partitions:
            result = m.PartitionError(topic=ref.topic, partition=ref.partition)
            if txn.state is not TxnState.ONGOING or (ref.topic, ref.partition) not in txn.partitions:
                result.error_code = errors.InvalidTxnStateError.errno
                result.error_message = (f"{ref.topic}-{ref.partition} is not in the open transaction of "
                                        f"{txn.transactional_id!r}: add it before writing to it")
            results.append(result)
        return results

    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
                     partitions: list[tuple[str, int]]) -> dict[tuple[str, int], errors.BrokerError]:
        """For a partition leader (KIP-890): why each of ``partitions`` may not take the producer's transactional
        write (absent: it may). Asked of the id's coordinator, here or over the internal listener."""
        request = m.AddPartitionsToTxnRequest(
            transactional_id=transactional_id, producer_id=producer_id, producer_epoch=producer_epoch, verify_only=True,
            partitions=[m.TopicPartitionRef(topic=t, partition=p) for t, p in partitions])
        try:
            try:
                answer = await self.add_partitions(request)
            except errors.NotCoordinatorError:
                link = CoordinatorLink(await self._cluster_client(), transactional_id, group_type="transaction",
                                       retry_for_s=5.0)
                answer = await link.request(ApiKey.ADD_PARTITIONS_TO_TXN, request)
        except errors.BrokerError as exc:
            return {tp: exc for tp in partitions}
        except errors.TidewayError as exc:
            refusal = errors.ConcurrentTransactionsError(f"the transaction coordinator could not be asked: {exc}")
            return {tp: refusal for tp in partitions}
        return {(r.topic, r.partition): errors.error_for_code(r.error_code, r.error_message)
                for r in answer.results if r.error_code}

    async def end_txn(self, request: m.EndTxnRequest) -> m.EndTxnResponse:
        """Commit or abort: the decision is written and answered; the markers follow (see the module's doc)."""
        _check_transactional_id(request.transactional_id)
        async with self._lock(request.transactional_id):
            return await self._end_txn(request)

    async def _end_txn(self, request: m.EndTxnRequest) -> m.EndTxnResponse:
        index, txn = self._checked(request.transactional_id, request.producer_id, request.producer_epoch)
        wanted = TxnState.PREPARE_COMMIT if request.commit else TxnState.PREPARE_ABORT
        done = TxnState.COMPLETE_COMMIT if request.commit else TxnState.COMPLETE_ABORT
        if txn.state in (wanted, done):
            return m.EndTxnResponse()  # a retry of the same end
        if txn.state is not TxnState.ONGOING:
            raise errors.InvalidTxnStateError(
                f"transaction of {txn.transactional_id!r} is {txn.state.value}: there is none open to "
                f"{'commit' if request.commit else 'abort'}")
        await self._prepare(index, txn, wanted)
        return m.EndTxnResponse()

    def describe(self, request: m.DescribeTransactionsRequest) -> m.DescribeTransactionsResponse:
        out = []
        for transactional_id in request.transactional_ids:
            try:
                self.state.check(transactional_id)
                txn = self.txns.get(transactional_id)
                if txn is None:
                    raise errors.TransactionalIdNotFoundError(f"no transactional id {transactional_id!r}")
                out.append(txn.describe())
            except errors.BrokerError as exc:
                out.append(m.TransactionDescription(transactional_id=transactional_id, error_code=exc.errno,
                                                    error_message=exc.message))
        return m.DescribeTransactionsResponse(transactions=out)

    def list(self, request: m.ListTransactionsRequest) -> m.ListTransactionsResponse:
        now = _now_ms()
        out = []
        for txn in self.txns.values():
            if request.states and txn.state.value not in request.states:
                continue
            if request.older_than_ms >= 0 and (txn.started_ms < 0 or txn.state in _ENDED
                                               or now - txn.started_ms < request.older_than_ms):
                continue
            out.append(txn.describe())  # (the native answer carries partitions and timeout too; Kafka's does not)
        return m.ListTransactionsResponse(transactions=out)

    # -- ending transactions -------------------------------------------------------------------------

    async def _prepare(self, index: int, txn: Txn, state: TxnState, *, epoch: int | None = None) -> Txn:
        new = Txn(txn.transactional_id, txn.producer_id, txn.producer_epoch if epoch is None else epoch,
                  txn.timeout_ms, state, set(txn.partitions), txn.started_ms)
        await self._write(index, txn, new)
        self._complete_later(new)
        return new

    async def _abort(self, index: int, txn: Txn, *, why: str) -> None:
        """Abort the open transaction with the next epoch: the producer that had it is fenced."""
        log.info("transactional id %s: aborting its open transaction (%s)", txn.transactional_id, why)
        await self._prepare(index, txn, TxnState.PREPARE_ABORT, epoch=min(txn.producer_epoch + 1, EPOCH_MAX))

    def _complete_later(self, txn: Txn) -> None:
        if txn.transactional_id in self._completing:
            return
        task = asyncio.get_running_loop().create_task(self._complete(txn))
        self._completing[txn.transactional_id] = task
        task.add_done_callback(lambda _t, key=txn.transactional_id: self._completing.pop(key, None))

    async def _complete(self, txn: Txn) -> None:
        """Write the markers of a decided transaction (retrying while leaders move), then its Complete state."""
        commit = txn.state is TxnState.PREPARE_COMMIT
        backoff = Backoff(initial_s=0.05, max_s=2.0)
        left = set(txn.partitions)
        retry = False
        while left:
            left = await self._write_markers(txn, commit, left, refresh=retry)
            if left:
                retry = True  # (leaders moved, most likely)
                await backoff.wait()
        while self.txns.get(txn.transactional_id) is txn:
            done = Txn(txn.transactional_id, txn.producer_id, txn.producer_epoch, txn.timeout_ms,
                       TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT)
            try:
                async with self._lock(txn.transactional_id):
                    if self.txns.get(txn.transactional_id) is not txn:
                        return
                    await self._write(self._index(txn.transactional_id), txn, done)
                log.info("transactional id %s: %s (%d partitions)", txn.transactional_id,
                         "committed" if commit else "aborted", len(txn.partitions))
                return
            except errors.NotCoordinatorError:
                return  # the next coordinator completes it (its state says Prepare*)
            except errors.TidewayError as exc:
                log.info("transactional id %s: completion not written yet: %s", txn.transactional_id, exc)
                await backoff.wait()

    async def _write_markers(self, txn: Txn, commit: bool, partitions: set[tuple[str, int]], *,
                             refresh: bool = False) -> set[tuple[str, int]]:
        """Send the markers to each partition's leader (``refresh``: ask the cluster who leads them first); the
        partitions still without one."""
        try:
            client = await self._cluster_client()
        except errors.TidewayError as exc:  # (no broker answered: this one may be stopping)
            log.info("markers of %s: no cluster client yet: %s", txn.transactional_id, exc)
            return partitions
        topics = sorted({topic for topic, _ in partitions})
        if refresh or any(topic not in client.topics for topic in topics):
            try:
                await client.refresh_metadata(topics)
            except errors.TidewayError:
                pass
        by_leader: dict[int, list[tuple[str, int]]] = {}
        left: set[tuple[str, int]] = set()
        for topic, partition in partitions:
            if topic not in client.topics:
                continue  # deleted since: nothing to mark
            try:
                by_leader.setdefault(client.leader_for(topic, partition), []).append((topic, partition))
            except errors.TidewayError:
                left.add((topic, partition))

        async def send(leader: int, refs: list[tuple[str, int]]) -> None:
            request = m.WriteTxnMarkersRequest(markers=[m.TxnMarker(
                producer_id=txn.producer_id, producer_epoch=txn.producer_epoch, commit=commit, coordinator_epoch=0,
                partitions=[m.TopicPartitionRef(topic=t, partition=p) for t, p in refs])])
            try:
                if leader == self.broker_id and self.write_local_markers is not None:
                    response = await self.write_local_markers(request)  # this broker leads them: no round trip
                else:
                    response = await (await client.connection(leader)).request(ApiKey.WRITE_TXN_MARKERS, request)
            except errors.TidewayError as exc:
                log.info("markers of %s to broker %d: %s", txn.transactional_id, leader, exc)
                left.update(refs)
                return
            for result in response.results:
                if result.error_code == errors.UnknownTopicOrPartitionError.errno:
                    continue  # deleted meanwhile
                if result.error_code:
                    log.info("marker of %s on %s-%d: %s", txn.transactional_id, result.topic, result.partition,
                             result.error_message)
                    left.add((result.topic, result.partition))

        await asyncio.gather(*(send(leader, refs) for leader, refs in by_leader.items()))
        return left

    async def _cluster_client(self) -> TidewayClient:
        if self._client is None:
            client = self._peer_client()
            await client.start()
            if self._client is None:
                self._client = client
            else:
                await client.close()
        return self._client

    # -- timeouts ------------------------------------------------------------------------------------

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_INTERVAL_S)
            try:
                await self._abort_expired()
            except Exception:
                log.exception("transaction timeouts: sweep failed")

    async def _abort_expired(self) -> None:
        now = _now_ms()
        for txn in list(self.txns.values()):
            if txn.state in _ENDED and now - txn.updated_ms > self.idle_id_expiry_ms:
                await self._forget_idle(txn)
                continue
            if txn.state is not TxnState.ONGOING or now - txn.started_ms <= txn.timeout_ms:
                continue
            try:
                async with self._lock(txn.transactional_id):
                    if self.txns.get(txn.transactional_id) is not txn:
                        continue  # it changed meanwhile
                    index = self.state.check(txn.transactional_id)
                    await self._abort(index, txn, why=f"open longer than its timeout of {txn.timeout_ms} ms")
            except errors.TidewayError as exc:
                log.info("transactional id %s: timed out, not aborted yet: %s", txn.transactional_id, exc)

    async def _forget_idle(self, txn: Txn) -> None:
        try:
            async with self._lock(txn.transactional_id):
                if self.txns.get(txn.transactional_id) is not txn:
                    return  # it changed meanwhile
                await self.state.write(self.state.check(txn.transactional_id), [(["txn", txn.transactional_id], None)])
                self.txns.pop(txn.transactional_id, None)
                self._locks.pop(txn.transactional_id, None)
            log.info("transactional id %s: no transaction for %d s, forgotten", txn.transactional_id,
                     self.idle_id_expiry_ms // 1000)
        except errors.TidewayError as exc:
            log.info("transactional id %s: idle, not forgotten yet: %s", txn.transactional_id, exc)
