"""Exactly-once through faults (issue 44): a consume-transform-produce processor (tests/fault/txn_processor.py, with
librdkafka's transactional API through the Kafka listener and with the native client) turns every input into one output while, in turn, the processor is SIGKILLed and
restarted, the broker coordinating its transactional id is SIGKILLed and restarted, the leader of an output
partition is SIGKILLed and restarted, and the processor is SIGKILLed and restarted once more.

A read_committed consumer of the output then sees every input exactly once; a read_uncommitted one sees more
(the attempts the kills aborted), so the run is known to have exercised aborts.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.harness.processes import OPERATOR_KEY, REPO_ROOT
from tests.kafka.clients import confluent_config
from tests.kafka.raw import RawKafka
from tideway.native import TidewayClient
from tideway.protocol import errors
from tideway.protocol import messages as m
from tideway.protocol.messages import ApiKey

pytestmark = [pytest.mark.timeout(600), pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)]

# 10,000 leave every fault (one per tenth of the inputs) with inputs to spare; TIDEWAY_TXN_FAULT_INPUTS=100000 for a long run.
INPUTS = int(os.environ.get("TIDEWAY_TXN_FAULT_INPUTS", "10000"))
PARTITIONS = 3
TRANSACTIONAL_ID = "enricher"
# How long each transaction (of up to 100 inputs) stays open with its outputs written, where a kill hurts most.
# It paces the processors too (at most 500 and 330 inputs a second), so that every fault comes while inputs are
# left: the native processor is the quicker (librdkafka's consume and commit wait on timers) and pauses longer.
PAUSE_S = {"kafka": "0.2", "native": "0.3"}


class Processor:
    """The processor process, restarted when it exits by itself (a fenced or failed instance exits, and its
    supervisor starts it again, as a deployment would)."""

    def __init__(self, interface: str, bootstrap: str, log_path) -> None:
        self.interface, self.bootstrap, self.log_path = interface, bootstrap, log_path
        self.exits = 0
        self._start()

    def _start(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.fault.txn_processor", self.interface, self.bootstrap, OPERATOR_KEY, "enrichers",
             TRANSACTIONAL_ID, str(self.log_path), PAUSE_S[self.interface]],
            cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=open(str(self.log_path) + ".err", "ab"))

    def supervise(self) -> None:
        if self.process.poll() is not None:
            self.exits += 1
            self._start()

    async def kill_mid_transaction_and_restart(self) -> None:
        """SIGKILL while a transaction is open (its outputs written), then start a new instance."""
        deadline = time.monotonic() + 30
        while not _last_line(self.log_path).get("open") and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)
        self._start()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)


def _last_line(log_path) -> dict:
    with open(log_path, "rb") as lines:
        lines.seek(max(0, lines.seek(0, os.SEEK_END) - 4096))
        last = lines.read().splitlines()
    return json.loads(last[-1]) if last and last[-1].endswith(b"}") else {}


def _committed_inputs(log_path) -> int:
    if not log_path.exists():
        return 0
    return sum(json.loads(line).get("committed", 0) for line in open(log_path) if line.strip())


async def _until_progress(processor: Processor, more: int, timeout_s: float = 120) -> None:
    """Until the processors have committed ``more`` inputs beyond what they had (or every input: transactions
    commit each input once, else the test fails at the end)."""
    target = min(_committed_inputs(processor.log_path) + more, INPUTS)
    deadline = time.monotonic() + timeout_s
    while _committed_inputs(processor.log_path) < target:
        assert time.monotonic() < deadline, f"no progress to {target} committed inputs in {timeout_s} s"
        processor.supervise()
        await asyncio.sleep(0.2)


def _outputs(bootstrap: str, isolation_level: str, at_least: int) -> Counter:
    """Every output's (input partition, input offset), read until ``at_least`` and then quiet for 3 s (or until
    nothing came for a minute: the processor is stuck)."""
    consumer = Consumer(confluent_config(bootstrap, OPERATOR_KEY, **{
        "group.id": f"check-{time.monotonic_ns()}", "isolation.level": isolation_level, "enable.auto.commit": False}))
    consumer.assign([TopicPartition("out", p, 0) for p in range(PARTITIONS)])
    seen: Counter = Counter()
    quiet_since = time.monotonic()
    try:
        while time.monotonic() - quiet_since < (3 if sum(seen.values()) >= at_least else 60):
            messages = [m for m in consumer.consume(2000, 0.5) if m.error() is None]
            if messages:
                quiet_since = time.monotonic()
            for message in messages:
                headers = dict(message.headers() or [])
                seen[(int(headers["in-partition"]), int(headers["in-offset"]))] += 1
    finally:
        consumer.close()
    return seen


def _transaction_coordinator(deployment) -> int:
    with RawKafka(deployment.kafka_bootstrap.split(",")[0], OPERATOR_KEY) as kafka:
        found = kafka.request(10, 3, key=TRANSACTIONAL_ID, key_type=1)
    assert found.error_code == 0, found
    return found.node_id


async def _kill_and_restart(deployment, broker_id: int) -> None:
    broker = deployment.brokers[broker_id]
    broker.kill()
    await asyncio.sleep(3)
    broker.restart()
    await deployment.wait_until(lambda s: all(len(p.isr) == 3 for p in s.partitions if p.topic in ("in", "out")),
                                timeout_s=60, what="every replica back in sync")


@pytest.mark.parametrize("interface", ["kafka", "native"])
async def test_every_input_is_output_exactly_once_through_processor_coordinator_and_leader_kills(deployment_factory,
                                                                                                  tmp_path, interface):
    deployment = deployment_factory(brokers=3, session_timeout_ms=2000, kafka=True)
    async with TidewayClient(deployment.bootstrap) as client:
        for topic in ("in", "out"):
            await client.create_topic(topic, partitions=PARTITIONS, replication_factor=3,
                                      configs={"min.insync.replicas": "2"})
    await deployment.wait_until(lambda s: sum(1 for p in s.partitions if p.topic in ("in", "out") and len(p.isr) == 3)
                                == 2 * PARTITIONS, what="topics in sync")
    bootstrap = deployment.kafka_bootstrap
    source = Producer(confluent_config(bootstrap, OPERATOR_KEY, **{"enable.idempotence": True, "linger.ms": 20}))
    for i in range(INPUTS):
        source.produce("in", value=b"input %07d" % i, partition=i % PARTITIONS)
        if i % 10_000 == 0:
            source.poll(0)
    assert source.flush(120) == 0

    log_path = tmp_path / "processor.log"
    step = INPUTS // 10
    processor = Processor(interface, bootstrap if interface == "kafka" else deployment.bootstrap, log_path)

    async def supervise() -> None:
        while True:
            processor.supervise()
            await asyncio.sleep(0.2)

    try:
        await _until_progress(processor, step)
        await processor.kill_mid_transaction_and_restart()  # 1: the processor
        await _until_progress(processor, step)
        await _kill_and_restart(deployment, await asyncio.to_thread(_transaction_coordinator, deployment))  # 2
        await _until_progress(processor, step)
        state = await deployment.describe()
        await _kill_and_restart(deployment, deployment.partition(state, "out", 0).leader)  # 3: an output leader
        await _until_progress(processor, step)
        await processor.kill_mid_transaction_and_restart()  # 4: the processor again
        supervisor = asyncio.ensure_future(supervise())
        try:
            committed = await asyncio.to_thread(_outputs, bootstrap, "read_committed", INPUTS)
        finally:
            supervisor.cancel()
    finally:
        processor.stop()
    inputs = {(i % PARTITIONS, i // PARTITIONS) for i in range(INPUTS)}
    assert set(committed) == inputs, f"{len(inputs - set(committed))} inputs have no committed output"
    twice = [key for key, count in committed.items() if count > 1]
    assert not twice, f"{len(twice)} inputs were output more than once, e.g. {twice[:3]}"
    everything = await asyncio.to_thread(_outputs, bootstrap, "read_uncommitted", INPUTS)
    assert sum(everything.values()) > INPUTS, "no aborted attempt: the kills exercised nothing"
    errors = (log_path.parent / "processor.log.err").read_text(errors="replace")
    print(f"{interface}: {INPUTS} inputs; {sum(everything.values()) - INPUTS} outputs of aborted attempts; the processor exited "
          f"{processor.exits} time(s) by itself; its stderr: {len(errors)} bytes")


async def test_a_prepared_transaction_whose_coordinator_dies_is_completed_by_the_next_one(deployment_factory):
    """Recovery: the partition's only replica is stopped (SIGSTOP) so the commit's marker cannot be written, the
    transaction is committed (decided: PrepareCommit), and the broker coordinating it is SIGKILLed. The broker
    that takes the transactional id over finds the decision and writes the marker once the partition is back;
    read_committed consumers get the transaction's records."""
    from tideway.native import Consumer, TransactionalProducer
    from tideway.native.transactions import describe_transaction

    deployment = deployment_factory(brokers=3, session_timeout_ms=2000)
    async with TidewayClient(deployment.bootstrap) as client:
        await client.create_topic("ledger", partitions=1, replication_factor=1)  # no other replica to take over
        await deployment.wait_until(lambda s: deployment.partition(s, "ledger", 0).leader > 0, what="a leader")
        leader = deployment.partition(await deployment.describe(), "ledger", 0).leader
        transactional_id = coordinator = None
        for n in range(50):  # an id whose coordinator is not the partition's leader
            found = None
            while found is None:  # (the first lookup creates __transaction_state)
                try:
                    found = await client.request_any(ApiKey.FIND_COORDINATOR, m.FindCoordinatorRequest(
                        group_id=f"recovering-{n}", group_type="transaction"))
                except errors.CoordinatorNotAvailableError:
                    await asyncio.sleep(0.2)
            if found.node_id != leader:
                node = found.node_id
                transactional_id, coordinator = f"recovering-{n}", node
                break
        assert transactional_id is not None
        producer = TransactionalProducer(client, transactional_id, linger_ms=1)
        await producer.start()
        producer.begin()
        for i in range(5):
            await (await producer.send("ledger", b"committed %d" % i, partition=0))
        deployment.brokers[leader].signal(signal.SIGSTOP)  # the marker cannot be written now
        try:
            await producer.commit()  # decided and answered; the marker waits
            deployment.brokers[coordinator].kill()
        finally:
            deployment.brokers[leader].signal(signal.SIGCONT)
    deployment.brokers[coordinator].restart()

    async with TidewayClient(deployment.bootstrap) as client:
        deadline = time.monotonic() + 60
        while True:
            try:
                state = (await describe_transaction(client, transactional_id)).state
            except Exception:  # noqa: BLE001 - the id's coordinator is moving
                state = "?"
            if state == "CompleteCommit":
                break
            assert time.monotonic() < deadline, f"the transaction is {state}, not completed"
            await asyncio.sleep(0.5)
        async with Consumer(client, isolation_level="read_committed") as consumer:
            await consumer.assign([("ledger", 0)], start="earliest")
            values = []
            while len(values) < 5 and time.monotonic() < deadline:
                for records in (await consumer.getmany(1000)).values():
                    values += [r.value for r in records]
    assert values == [b"committed %d" % i for i in range(5)]
    resumed = [b.log_text() for b in deployment.brokers.values()]
    assert any("1 transactions to complete" in text for text in resumed), "no coordinator had to complete it"
