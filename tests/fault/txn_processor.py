"""A consume-transform-produce processor for the transactions fault test (librdkafka's transactional API):

    python -m tests.fault.txn_processor KAFKA_BOOTSTRAP KEY GROUP TRANSACTIONAL_ID LOGFILE [PAUSE_S]

Reads "in" (read_committed, group GROUP), writes one record to "out" per input (same partition, the input's
partition and offset in its headers) and commits the inputs' offsets in the same transaction, batch after batch
(up to 200 inputs, written, then a pause of PAUSE_S (default 0.1 s) with the transaction open: the faults come
while it works, mostly mid-transaction).
An error aborts the transaction and goes back to the committed offsets (a fenced producer exits, as an
application must). LOGFILE gets a line per committed transaction.
"""

import json
import sys
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition


def main(bootstrap: str, key: str, group: str, transactional_id: str, path: str, pause_s: str = "0.1") -> None:
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
        messages = [m for m in consumer.consume(200, 1.0) if m.error() is None]
        if not messages:
            continue
        try:
            producer.begin_transaction()
            for message in messages:
                producer.produce("out", value=message.value(), partition=message.partition(), headers=[
                    ("in-partition", str(message.partition()).encode()), ("in-offset", str(message.offset()).encode())])
            producer.flush(60)
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


if __name__ == "__main__":
    main(*sys.argv[1:7])
