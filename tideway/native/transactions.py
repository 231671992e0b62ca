"""Transactions for Tideway's native producer: writes to several partitions, and a consumer group's offsets,
that count together or not at all (Kafka's transactional producer, KIP-98 and KIP-447).

::

    async with TransactionalProducer(bootstrap, "orders-enricher") as producer:   # fences an older instance
        producer.begin()
        await producer.send("enriched", value, key=key)
        await producer.send_offsets({("orders", 0): 1042}, group_id="enricher")
        await producer.commit()          # or abort(): nothing of it is read by read_committed consumers

A transactional id names one logical producer: starting an instance gives it a new epoch at the transaction
coordinator, which aborts whatever the previous instance left open and refuses that instance from then on
(ProducerFencedError: stop it). A partition is added to the transaction on the first write to it: the request
goes at once, the send does not wait for it, and the partition's batches leave only once it is answered (as
Kafka's producer does: the add's round trip overlaps the application's sends). The records go as
transactional batches of the producer. ``commit``
sends everything still buffered, then asks the coordinator to commit: the answer means the outcome is decided
and will be written (the markers follow). A send that failed makes the transaction abort-only.

Consumers see a transaction's records once it commits when they read ``read_committed`` (the native
Consumer's default, librdkafka's too); ``read_uncommitted`` readers see aborted ones as well.
"""

from __future__ import annotations

import asyncio
import logging

from tideway.native.client import TidewayClient
from tideway.native.group import CoordinatorLink
from tideway.native.pending import RecordFuture
from tideway.native.producer import Producer
from tideway.protocol import errors
from tideway.protocol import messages as m
from tideway.protocol.messages import ApiKey
from tideway.record.batch import ATTRIBUTE_TRANSACTIONAL
from tideway.retry import Backoff

__all__ = ["TransactionalProducer", "abort_transaction", "describe_transaction", "list_transactions"]

log = logging.getLogger(__name__)

# Asked again (the coordinator is busy completing the previous transaction, or moving).
_RETRY = (errors.ConcurrentTransactionsError, errors.NotCoordinatorError, errors.CoordinatorNotAvailableError,
          errors.CoordinatorLoadInProgressError)


class TransactionalProducer(Producer):
    def __init__(self, client: TidewayClient | str, transactional_id: str, *, transaction_timeout_ms: int = 60_000,
                 **options) -> None:
        if options.get("acks", "all") not in ("all", -1, "-1") or options.get("idempotent", True) is False:
            raise ValueError("a transactional producer is idempotent with acks=all")
        options["acks"], options["idempotent"] = "all", True
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self._in_transaction = False
        self._added: set[tuple[str, int]] = set()  # partitions of the open transaction (the add asked, maybe not answered)
        self._adding: dict[tuple[str, int], asyncio.Future] = {}  # those whose add is not answered yet
        self._joined = False  # the coordinator has the open transaction (a partition or a group's offsets were added)
        self._failed: BaseException | None = None  # a send of the open transaction failed: abort only
        self._add_refused: BaseException | None = None  # the coordinator refused to add a partition (fenced...)
        super().__init__(client, **options)
        self._batch_flags = ATTRIBUTE_TRANSACTIONAL
        self._transactional_id = transactional_id
        self._coordinator = CoordinatorLink(self.client, transactional_id, group_type="transaction")

    async def start(self) -> None:
        await super().start()
        answer: m.InitProducerIdResponse = await self._ask(ApiKey.INIT_PRODUCER_ID, m.InitProducerIdRequest(
            transactional_id=self.transactional_id, transaction_timeout_ms=self.transaction_timeout_ms))
        self.producer_id, self.producer_epoch = answer.producer_id, answer.producer_epoch
        self._sequences = {}
        log.info("transactional producer %s: producer %d epoch %d", self.transactional_id, self.producer_id,
                 self.producer_epoch)

    def _new_producer_id(self) -> None:
        if getattr(self, "_coordinator", None) is None:  # (the base class, before start: set from the coordinator)
            super()._new_producer_id()
            return
        # A batch failed for good: the open transaction cannot commit; the producer keeps its id and epoch.
        self._failed = self._failed or errors.OutOfOrderSequenceError("a write of this transaction failed: abort it")
        self._sequences = {}

    async def _ask(self, api: ApiKey, request):
        backoff = Backoff(initial_s=0.02, max_s=0.5, deadline_s=self.request_timeout_s)
        while True:
            try:
                return await self._coordinator.request(api, request)
            except _RETRY:
                if not await backoff.wait():
                    raise

    # -- the transaction ------------------------------------------------------------------------------

    def begin(self) -> None:
        if self._in_transaction:
            raise errors.InvalidTxnStateError("a transaction is open already: commit or abort it first")
        self._in_transaction, self._added, self._failed, self._joined = True, set(), None, False
        self._adding, self._add_refused = {}, None

    # send() is the base class's: a record goes into its partition's open batch, and a partition gets a batch
    # only through _new_batch, where the transaction's checks are (once per batch, not per record: a wrapper of
    # send cost a third of a send). No batch is open outside a transaction (ending one flushes them all).

    async def send_many(self, topic: str, records, *, batch_bytes_max: int | None = None) -> list[RecordFuture]:
        """As Producer.send_many, inside the open transaction: each record's partition is chosen here."""
        count = await self._ready_to_txn(topic)
        placed = [(value, key, headers, self._partition_for(topic, key, partition, count))
                  for value, key, headers, partition in records]
        new = {(topic, p) for _v, _k, _h, p in placed} - self._added
        if new:
            self._add_soon(new)
        return await super().send_many(topic, placed, batch_bytes_max=batch_bytes_max)

    async def _ready_to_txn(self, topic: str) -> int:
        self._check_open()
        return await self._ready_to_append(topic)

    def _check_open(self) -> None:
        if not self._in_transaction:
            raise errors.InvalidTxnStateError("send inside a transaction: call begin() first")

    def _new_batch(self, topic: str, partition: int, *, wake: bool = True):
        self._check_open()
        if (topic, partition) not in self._added:
            self._add_soon({(topic, partition)})
        return super()._new_batch(topic, partition, wake=wake)

    def _add_soon(self, partitions: set[tuple[str, int]]) -> None:
        """Ask the coordinator to add ``partitions`` now; their batches wait for the answer (_send_ready). A
        refusal makes the transaction abort-only (and the partitions' batches are refused by their leaders)."""
        self._added |= partitions
        self._joined = True
        request = m.AddPartitionsToTxnRequest(
            transactional_id=self.transactional_id, producer_id=self.producer_id, producer_epoch=self.producer_epoch,
            partitions=[m.TopicPartitionRef(topic=t, partition=p) for t, p in sorted(partitions)])
        added = asyncio.get_running_loop().create_future()
        for tp in partitions:
            self._adding[tp] = added

        def answered(done: asyncio.Future) -> None:
            for tp in partitions:
                if self._adding.get(tp) is done:
                    del self._adding[tp]
            if not done.cancelled() and done.exception() is not None:
                self._add_refused = self._add_refused or done.exception()
            self._wakeup.set()  # batches held for it may go (or fail) now

        added.add_done_callback(answered)
        node = self._coordinator.node_id
        connection = self.client.open_connection(node) if node is not None else None
        if connection is None:
            self._add_slowly(request, added)
            return
        # On the wire now (a loop of sends may not yield until the commit: a task would send it only then), and
        # settled by a callback of the answer: the partition's batches may leave at the sender's next turn (a
        # task awaiting the answer took loop turns that such a loop of sends gives only once per batch).
        sent = connection.send(ApiKey.ADD_PARTITIONS_TO_TXN, request)

        def give_up() -> None:  # no answer within the request timeout: the full path, once
            if not added.done():
                sent.cancel()
                self._add_slowly(request, added)

        gave_up = asyncio.get_running_loop().call_later(self.request_timeout_s, give_up)

        def on_answer(answer: asyncio.Future) -> None:
            gave_up.cancel()
            if added.done() or answer.cancelled():
                return  # (settled, or given up on: the full path has it)
            exc = answer.exception()
            if isinstance(exc, (*_RETRY, errors.ConnectionClosedError)):
                self._add_slowly(request, added)  # (the coordinator moved or is busy: its full path)
            elif exc is not None:
                added.set_exception(exc)
            else:
                self._settle(added, answer.result())

        sent.add_done_callback(on_answer)

    def _add_slowly(self, request: m.AddPartitionsToTxnRequest, added: asyncio.Future) -> None:
        """The add through the coordinator's full path (found again, retried while it moves); settles ``added``."""
        async def ask() -> None:
            try:
                answer = await self._ask(ApiKey.ADD_PARTITIONS_TO_TXN, request)
            except Exception as exc:  # noqa: BLE001 (any failure is the add's refusal, raised at commit)
                if not added.done():
                    added.set_exception(exc)
                return
            if not added.done():
                self._settle(added, answer)

        task = asyncio.ensure_future(ask())
        added.add_done_callback(lambda _done: task.done() or task.cancel())  # (and holds the task meanwhile)

    @staticmethod
    def _settle(added: asyncio.Future, answer: m.AddPartitionsToTxnResponse) -> None:
        for result in answer.results:
            if result.error_code:
                added.set_exception(errors.error_for_code(result.error_code, result.error_message))
                return
        added.set_result(None)

    async def _send_ready(self) -> None:
        if self._adding and any((b.topic, b.partition) in self._adding for b in self._ready):
            # A batch of a partition not added yet: everything waits for the adds (under a millisecond, once per
            # partition and transaction), so batches still leave in order.
            await asyncio.wait(set(self._adding.values()))
        await super()._send_ready()

    def _send_at_once(self, batch) -> bool:
        if (batch.topic, batch.partition) in self._adding:
            return False  # the sender sends it once the partition is added
        return super()._send_at_once(batch)

    async def _added_all(self) -> None:
        """Wait for every add of the open transaction; raise the first refusal."""
        while self._adding:
            await asyncio.wait(set(self._adding.values()))
        if self._add_refused is not None:
            raise self._add_refused

    async def send_offsets(self, offsets: dict[tuple[str, int], int], group_id: str, *, member_id: str = "",
                           member_epoch: int = -1) -> None:
        """Commit ``offsets`` (the next offset to read, per partition) for ``group_id`` in this transaction: they
        count if it commits (a consume-transform-produce step's inputs), never if it aborts."""
        if not self._in_transaction:
            raise errors.InvalidTxnStateError("send offsets inside a transaction: call begin() first")
        await self._ask(ApiKey.ADD_OFFSETS_TO_TXN, m.AddOffsetsToTxnRequest(
            transactional_id=self.transactional_id, producer_id=self.producer_id, producer_epoch=self.producer_epoch,
            group_id=group_id))
        self._joined = True
        link = CoordinatorLink(self.client, group_id)
        answer: m.TxnOffsetCommitResponse = await link.request(ApiKey.TXN_OFFSET_COMMIT, m.TxnOffsetCommitRequest(
            transactional_id=self.transactional_id, group_id=group_id, producer_id=self.producer_id,
            producer_epoch=self.producer_epoch, member_id=member_id, member_epoch=member_epoch,
            offsets=[m.CommittedOffset(topic=t, partition=p, offset=o) for (t, p), o in sorted(offsets.items())]))
        for result in answer.offsets:
            if result.error_code:
                raise errors.error_for_code(result.error_code, result.error_message)

    async def commit(self) -> None:
        """Send what is buffered, then commit: every record and offset of the transaction counts."""
        await self._end(commit=True)

    async def abort(self) -> None:
        """Abort: nothing of the transaction is read by read_committed consumers; its offsets do not count."""
        await self._end(commit=False)

    async def _end(self, *, commit: bool) -> None:
        if not self._in_transaction:
            raise errors.InvalidTxnStateError("no transaction is open: call begin() first")
        try:
            await self._added_all()
        except errors.TidewayError:
            if commit:
                raise
        await self.flush()
        if commit and self._failed is not None:
            raise errors.InvalidTxnStateError(f"the transaction cannot commit: {self._failed}; abort it")
        if self._joined:  # (a transaction that wrote nothing has nothing to end)
            await self._ask(ApiKey.END_TXN, m.EndTxnRequest(
                transactional_id=self.transactional_id, producer_id=self.producer_id,
                producer_epoch=self.producer_epoch, commit=commit))
        self._in_transaction, self._added, self._failed, self._joined = False, set(), None, False


# -- looking at transactions (operators, the console) -------------------------------------------------


async def list_transactions(client: TidewayClient, *, states: list[str] | None = None,
                            older_than_ms: int = -1) -> list[m.TransactionDescription]:
    """The transactions every coordinator holds (``states``: only those; ``older_than_ms``: only those open
    longer), asked of every broker at once; a broker that does not answer is left out."""
    await client.refresh_metadata()

    async def ask(node: int) -> list[m.TransactionDescription]:
        try:
            connection = await client.connection(node)
            answer: m.ListTransactionsResponse = await connection.request(ApiKey.LIST_TRANSACTIONS, m.ListTransactionsRequest(
                states=states or [], older_than_ms=older_than_ms))
        except errors.TidewayError as exc:
            log.info("broker %d did not list its transactions: %s", node, exc)
            return []
        return answer.transactions

    found = await asyncio.gather(*(ask(node) for node in sorted(client.brokers)))
    return sorted((txn for listed in found for txn in listed), key=lambda txn: txn.transactional_id)


async def describe_transaction(client: TidewayClient, transactional_id: str) -> m.TransactionDescription:
    link = CoordinatorLink(client, transactional_id, group_type="transaction")
    answer: m.DescribeTransactionsResponse = await link.request(
        ApiKey.DESCRIBE_TRANSACTIONS, m.DescribeTransactionsRequest(transactional_ids=[transactional_id]))
    (txn,) = answer.transactions
    if txn.error_code:
        raise errors.error_for_code(txn.error_code, txn.error_message)
    return txn


async def abort_transaction(client: TidewayClient, transactional_id: str) -> m.TransactionDescription:
    """Abort the id's open transaction (its producer keeps its epoch: it may begin another). The description it
    had; INVALID_TXN_STATE when none is open."""
    txn = await describe_transaction(client, transactional_id)
    link = CoordinatorLink(client, transactional_id, group_type="transaction")
    await link.request(ApiKey.END_TXN, m.EndTxnRequest(transactional_id=transactional_id, producer_id=txn.producer_id,
                                                       producer_epoch=txn.producer_epoch, commit=False))
    return txn
