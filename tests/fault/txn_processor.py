"""A consume-transform-produce processor for the transactions fault test, with librdkafka's transactional API
through the Kafka listener or with Tideway's native client (TransactionalProducer and GroupConsumer):

    python -m tests.fault.txn_processor kafka|native BOOTSTRAP KEY GROUP TRANSACTIONAL_ID LOGFILE [PAUSE_S]

Reads "in" (read_committed, group GROUP), writes one record to "out" per input (same partition, the input's
partition and offset in its headers) and commits the inputs' offsets in the same transaction, batch after batch
(up to BATCH inputs, written, then a pause of PAUSE_S (default 0.1 s) with the transaction open: the faults come
while it works, mostly mid-transaction; LOGFILE gets a line when a transaction is open, so the test can kill
the processor then).
An error aborts the transaction and goes back to the committed offsets (a fenced producer exits, as an
application must). LOGFILE gets a line per committed transaction.
"""

import asyncio
import json
import sys
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from tideway.native import GroupConsumer, TidewayClient, TransactionalProducer
from tideway.protocol import errors

BATCH = 100  # inputs per transaction at most


def with_librdkafka(bootstrap: str, key: str, group: str, transactional_id: str, path: str, pause_s: str = "0.1") -> None:
    out = open(path, "a", buffering=1)
    common = {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN",
              "sasl.username": "tideway", "sasl.password": key}
    consumer = Consumer({**common, "group.id": group, "isolation.level": "read_committed",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "session.timeout.ms": 6000, "heartbeat.interval.ms": 1000})
    producer = Producer({**common, "transactional.id": transactional_id, "linger.ms": 5,
                         "transaction.timeout.ms": 10000})
    producer.init_transactions(60)
    consumer.subscribe(["in"])
    while True:
        messages = [m for m in consumer.consume(BATCH, 1.0) if m.error() is None]
        if not messages:
            continue
        try:
            producer.begin_transaction()
            for message in messages:
                producer.produce("out", value=message.value(), partition=message.partition(), headers=[
                    ("in-partition", str(message.partition()).encode()), ("in-offset", str(message.offset()).encode())])
            producer.flush(60)
            out.write(json.dumps({"t": time.monotonic(), "open": len(messages)}) + "\n")
            time.sleep(float(pause_s))  # the outputs written, the transaction open: where a kill hurts most
            producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                                 consumer.consumer_group_metadata(), 60)
            producer.commit_transaction(60)
            out.write(json.dumps({"t": time.monotonic(), "committed": len(messages)}) + "\n")
        except KafkaException as exc:
            error = exc.args[0]
            out.write(json.dumps({"t": time.monotonic(), "error": str(error)}) + "\n")
            if error.fatal():
                raise SystemExit(3) from None  # fenced: a newer instance runs
            if error.txn_requires_abort():
                producer.abort_transaction(60)
            elif not error.retriable():
                producer.abort_transaction(60)
            # Back to what the group committed: what this attempt read is read again.
            assignment = consumer.assignment()
            try:
                for tp in consumer.committed(assignment, 60):
                    consumer.seek(tp if tp.offset >= 0 else TopicPartition(tp.topic, tp.partition, 0))
            except KafkaException as again:  # (the group's coordinator moving): a restart reads from the commits
                out.write(json.dumps({"t": time.monotonic(), "error": str(again.args[0])}) + "\n")
                raise SystemExit(4) from None


async def with_native_client(bootstrap: str, key: str, group: str, transactional_id: str, path: str,
                             pause_s: str = "0.1") -> None:
    out = open(path, "a", buffering=1)
    async with TidewayClient(bootstrap, api_key=key) as client:
        producer = TransactionalProducer(client, transactional_id, transaction_timeout_ms=10000, linger_ms=5)
        await producer.start()
        consumer = GroupConsumer(client, group, ["in"], auto_offset_reset="earliest", enable_auto_commit=False,
                                 session_timeout_ms=6000)
        await consumer.start()
        while True:
            read = await consumer.getmany(1000, max_records=BATCH)
            if not any(read.values()):
                continue
            try:
                producer.begin()
                for (_topic, partition), records in read.items():
                    await producer.send_many("out", [(r.value, None, [("in-partition", str(partition).encode()),
                                                                      ("in-offset", str(r.offset).encode())], partition)
                                                     for r in records])
                await producer.flush()
                out.write(json.dumps({"t": time.monotonic(), "open": sum(len(r) for r in read.values())}) + "\n")
                await asyncio.sleep(float(pause_s))  # the outputs written, the transaction open
                await producer.send_offsets({tp: consumer.position(tp) for tp in read}, group,
                                            member_id=consumer.member_id, member_epoch=consumer.member_epoch)
                await producer.commit()
                out.write(json.dumps({"t": time.monotonic(), "committed": sum(len(r) for r in read.values())}) + "\n")
            except errors.ProducerFencedError as exc:
                out.write(json.dumps({"t": time.monotonic(), "error": str(exc)}) + "\n")
                raise SystemExit(3) from None  # fenced: a newer instance runs
            except errors.TidewayError as exc:
                out.write(json.dumps({"t": time.monotonic(), "error": str(exc)}) + "\n")
                try:
                    await producer.abort()
                    # Back to what the group committed: what this attempt read is read again.
                    owned = [tp for tp in read if tp in consumer.assignment()]
                    for tp, offset in (await consumer.committed(owned)).items():
                        await consumer.seek(tp, offset if offset >= 0 else "earliest")
                except errors.TidewayError as again:  # a restart starts from the commits
                    out.write(json.dumps({"t": time.monotonic(), "error": str(again)}) + "\n")
                    raise SystemExit(4) from None


if __name__ == "__main__":
    if sys.argv[1] == "native":
        asyncio.run(with_native_client(*sys.argv[2:8]))
    else:
        with_librdkafka(*sys.argv[2:8])
