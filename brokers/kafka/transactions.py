"""Kafka's transactional producer APIs on the Kafka listener: InitProducerId with a transactional id,
AddPartitionsToTxn, AddOffsetsToTxn and EndTxn, and the admin's DescribeTransactions and ListTransactions,
translated onto the brokers' transaction coordinator (brokers/transactions/)
through the same router and authorizer as Tideway's own clients (a tenant's transactional ids are its own).
FindCoordinator for a transaction (key type 1) is answered in apis.py beside the group's."""

from __future__ import annotations

import datetime

from kio.schema.errors import ErrorCode
from tideway_server.brokers.kafka.answers import (
    NO_THROTTLE,
    build,
    item_type,
    kafka_code,
    milliseconds,
)
from tideway_server.brokers.server.connection import Session
from tideway_server.brokers.server.router import Router

from tideway.protocol import errors
from tideway.protocol import messages as m
from tideway.protocol.messages import ApiKey

__all__ = ["KafkaTransactions"]


class KafkaTransactions:
    def __init__(self, router: Router) -> None:
        self._router = router
        self.handlers = {24: self.add_partitions_to_txn, 25: self.add_offsets_to_txn, 26: self.end_txn,
                         65: self.describe_transactions, 66: self.list_transactions}

    async def init_producer_id(self, request, response_type, session: Session):
        """A transactional producer's id and epoch (a new epoch fences the previous instance)."""
        native = m.InitProducerIdRequest(transactional_id=request.transactional_id,
                                         transaction_timeout_ms=milliseconds(request.transaction_timeout))
        try:
            answer: m.InitProducerIdResponse = await self._router.call(session, ApiKey.INIT_PRODUCER_ID, native)
        except errors.BrokerError as exc:
            return build(response_type, throttle_time=NO_THROTTLE, error_code=kafka_code(exc.errno), producer_id=-1,
                         producer_epoch=-1)
        return build(response_type, throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                     producer_id=answer.producer_id, producer_epoch=answer.producer_epoch)

    async def add_partitions_to_txn(self, request, response_type, session: Session):
        topic_type = item_type(response_type, "results_by_topic_v3_and_below")
        partition_type = item_type(topic_type, "results_by_partition")
        wanted = [(topic.name, index) for topic in request.v3_and_below_topics for index in topic.partitions]
        native = m.AddPartitionsToTxnRequest(
            transactional_id=request.v3_and_below_transactional_id, producer_id=request.v3_and_below_producer_id,
            producer_epoch=request.v3_and_below_producer_epoch,
            partitions=[m.TopicPartitionRef(topic=name, partition=index) for name, index in wanted])
        try:
            answer: m.AddPartitionsToTxnResponse = await self._router.call(session, ApiKey.ADD_PARTITIONS_TO_TXN, native)
            codes = {(r.topic, r.partition): kafka_code(r.error_code) for r in answer.results}
        except errors.BrokerError as exc:
            codes = {key: kafka_code(exc.errno) for key in wanted}
        by_topic: dict[str, list] = {}
        for name, index in wanted:
            by_topic.setdefault(name, []).append(build(partition_type, partition_index=index, partition_error_code=codes.get(
                (name, index), ErrorCode.unknown_topic_or_partition)))
        return build(response_type, throttle_time=NO_THROTTLE, results_by_topic_v3_and_below=tuple(
            build(topic_type, name=name, results_by_partition=tuple(parts)) for name, parts in by_topic.items()))

    async def add_offsets_to_txn(self, request, response_type, session: Session):
        return await self._error_only(response_type, session, ApiKey.ADD_OFFSETS_TO_TXN, m.AddOffsetsToTxnRequest(
            transactional_id=request.transactional_id, producer_id=request.producer_id,
            producer_epoch=request.producer_epoch, group_id=request.group_id))

    async def end_txn(self, request, response_type, session: Session):
        return await self._error_only(response_type, session, ApiKey.END_TXN, m.EndTxnRequest(
            transactional_id=request.transactional_id, producer_id=request.producer_id,
            producer_epoch=request.producer_epoch, commit=request.committed))

    async def _error_only(self, response_type, session: Session, api: ApiKey, native):
        """An API whose Kafka answer is an error code only."""
        try:
            await self._router.call(session, api, native)
        except errors.BrokerError as exc:
            return build(response_type, throttle_time=NO_THROTTLE, error_code=kafka_code(exc.errno))
        return build(response_type, throttle_time=NO_THROTTLE, error_code=ErrorCode.none)

    async def describe_transactions(self, request, response_type, session: Session):
        """``kafka-transactions.sh describe``: each id's state, producer, timeout, start and partitions (asked of its
        coordinator; another broker answers NOT_COORDINATOR for it)."""
        state_type = item_type(response_type, "transaction_states")
        topic_type = item_type(state_type, "topics")
        wanted = list(request.transactional_ids)
        try:
            answer: m.DescribeTransactionsResponse = await self._router.call(
                session, ApiKey.DESCRIBE_TRANSACTIONS, m.DescribeTransactionsRequest(transactional_ids=list(wanted)))
            found = {txn.transactional_id: txn for txn in answer.transactions}
        except errors.BrokerError as exc:
            found = {name: m.TransactionDescription(transactional_id=name, error_code=exc.errno) for name in wanted}
        states = []
        for name in wanted:
            txn = found.get(name) or m.TransactionDescription(transactional_id=name,
                                                              error_code=errors.TransactionalIdNotFoundError.errno)
            by_topic: dict[str, list[int]] = {}
            for ref in txn.partitions:
                by_topic.setdefault(ref.topic, []).append(ref.partition)
            states.append(build(
                state_type, error_code=kafka_code(txn.error_code), transactional_id=name,
                transaction_state=txn.state or "Dead", transaction_timeout=datetime.timedelta(milliseconds=txn.timeout_ms),
                transaction_start_time=_time(txn.started_ms), producer_id=txn.producer_id,
                producer_epoch=txn.producer_epoch,
                topics=tuple(build(topic_type, topic=topic, partitions=tuple(parts)) for topic, parts in by_topic.items())))
        return build(response_type, throttle_time=NO_THROTTLE, transaction_states=tuple(states))

    async def list_transactions(self, request, response_type, session: Session):
        """``kafka-transactions.sh list`` (this broker's share: clients ask every broker), by state, producer id
        and, from v1, how long they have been open."""
        state_type = item_type(response_type, "transaction_states")
        filters = list(request.state_filters or ())
        unknown = tuple(state for state in filters if state not in _STATES)
        native = m.ListTransactionsRequest(states=[state for state in filters if state in _STATES],
                                           older_than_ms=int(getattr(request, "duration_filter", -1)))
        try:
            answer: m.ListTransactionsResponse = await self._router.call(session, ApiKey.LIST_TRANSACTIONS, native)
        except errors.BrokerError as exc:
            return build(response_type, throttle_time=NO_THROTTLE, error_code=kafka_code(exc.errno),
                         unknown_state_filters=unknown, transaction_states=())
        producers = set(request.producer_id_filters or ())
        listed = [txn for txn in answer.transactions if not producers or txn.producer_id in producers]
        if filters and not native.states:
            listed = []  # only unknown states asked for
        return build(response_type, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, unknown_state_filters=unknown,
                     transaction_states=tuple(build(state_type, transactional_id=txn.transactional_id,
                                                    producer_id=txn.producer_id, transaction_state=txn.state)
                                              for txn in listed))


_STATES = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort")


def _time(ms: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
