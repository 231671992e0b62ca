"""The controller cut off from every broker for 30 s — a network partition, not a kill (issue 45).

Every process on a host of its own (tests/harness/control_plane.py with a network): Redis, the controller, three
brokers with Kafka listeners, the API server and gateway with its Celery worker. A tenant's producers write with
the tenant's keys: the native client (idempotent, acks=all), librdkafka on the Kafka listeners (idempotent,
acks=all, SASL/PLAIN) and REST publishes through the gateway. The links between the controller and each broker
are dropped (silence: the brokers' requests time out, nothing refuses them) for 30 s, then healed.

A kill (tests/fault/test_controller_outage.py) refuses connections at once; a partition leaves a broker waiting
on a controller that does not answer, which is the case that kept a broker from checking keys before issue 40.
Every send of the three producers must succeed, each must keep being acknowledged during the cut, and a group
reads back everything acknowledged.
"""

from __future__ import annotations

import asyncio
import threading
import time

import httpx
import pytest

from tests.fault.test_controller_outage import Sender
from tests.fault.test_kafka_failover import KafkaLoad
from tests.harness import hosts
from tideway.native import GroupConsumer, Producer, TidewayClient

pytestmark = [pytest.mark.timeout(400), pytest.mark.skipif(hosts.available() is not None,
                                                            reason=str(hosts.available()))]

CUT_S = 30
AFTER_S = 10
PARTITIONS = 3


@pytest.fixture(scope="module")
def plane(tmp_path_factory):
    from tests.harness.control_plane import running_control_plane

    home = tmp_path_factory.mktemp("partitioned")
    with hosts.Network() as network, \
            running_control_plane(home, f"sqlite://{home}/control.sqlite3", network=network) as plane:
        plane.network = network
        yield plane


class RestPublisher(threading.Thread):
    """A batch of 10 over REST every 20 ms; every answer that is not 200 is a failed send."""

    def __init__(self, base_url: str, key: str, queue: str) -> None:
        super().__init__(daemon=True)
        self.http = httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {key}"}, timeout=60)
        self.queue = queue
        self.acked: set[bytes] = set()
        self.acked_at: list[float] = []
        self.failures: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        batch = 0
        while not self.stop.is_set():
            values = [f"rest-{batch:06d}-{i}" for i in range(10)]
            try:
                answer = self.http.post(f"/api/v1/queues/{self.queue}/messages",
                                        json={"messages": [{"value": v} for v in values]})
            except httpx.HTTPError as exc:
                self.failures.append(repr(exc))
            else:
                if answer.status_code == 200:
                    self.acked.update(v.encode() for v in values)
                    self.acked_at.append(time.monotonic())
                else:
                    self.failures.append(f"{answer.status_code} {answer.text[:300]}")
            batch += 1
            time.sleep(0.02)
        self.http.close()


def test_the_controller_cut_off_from_every_broker_for_30_s_fails_no_send(plane):
    network = plane.network
    _slug, key = plane.create_tenant(plan="team")
    with plane.client(key) as api:
        made = api.post("/api/v1/queues/", json={"name": "orders", "mode": "stream", "partitions": PARTITIONS,
                                                 "replication_factor": 3})
        assert made.status_code == 201, made.text
    controller = network.hosts["controller"]
    brokers = [network.hosts[f"b{i}"] for i in (1, 2, 3)]
    rest = RestPublisher(plane.base_url, key, "orders")
    kafka = KafkaLoad(plane.deployment.kafka_bootstrap, key=key, topic="orders")
    outcome: dict = {}

    async def scenario() -> None:
        consumed: set[bytes] = set()
        async with Producer(plane.deployment.bootstrap, api_key=key, acks="all", linger_ms=5) as native_producer, \
                TidewayClient(plane.deployment.bootstrap, api_key=key) as consumer_client:
            native = Sender(native_producer, "orders", "native")
            native_task = asyncio.ensure_future(native.run())
            rest.start()
            kafka.start()
            member = GroupConsumer(consumer_client, "readers", ["orders"], auto_offset_reset="earliest")
            await member.start()
            reading = True

            async def read() -> None:
                while reading:
                    for records in (await member.getmany(timeout_ms=200)).values():
                        consumed.update(r.value for r in records)

            reader = asyncio.ensure_future(read())
            await asyncio.sleep(3)
            counts_before = (len(native.acked), len(rest.acked), _kafka_acked(kafka))
            for broker in brokers:
                network.cut(controller, broker)
            cut_at = time.monotonic()
            await asyncio.sleep(CUT_S)
            counts_during = (len(native.acked), len(rest.acked), _kafka_acked(kafka))
            network.heal()
            outcome["cut_s"] = time.monotonic() - cut_at
            outcome["acked_during_cut"] = [b - a for a, b in zip(counts_before, counts_during, strict=True)]
            outcome["rest_longest_gap_s"] = max((b - a for a, b in zip(rest.acked_at, rest.acked_at[1:], strict=False)
                                                 if a >= cut_at), default=None)
            await asyncio.sleep(AFTER_S)  # leaders move back after the heal: writes go on through that too
            native.stop.set()
            rest.stop.set()
            kafka.stop.set()
            await native_task
            await asyncio.to_thread(rest.join, 90)
            await asyncio.to_thread(kafka.join, 150)
            acked = native.acked | rest.acked | {v for values in kafka.acked.values() for v in values}
            deadline = time.monotonic() + 60
            while not acked <= consumed and time.monotonic() < deadline:
                await asyncio.sleep(0.2)
            reading = False
            await reader
            await member.stop()
            outcome.update(acked=acked, consumed=consumed, failures={
                "native": native.failures[:5], "rest": rest.failures[:5], "kafka": kafka.failures[:5]})

    asyncio.run(scenario())
    print(f"controller cut off {outcome['cut_s']:.1f} s; acknowledged during the cut (native, REST, Kafka): "
          f"{outcome['acked_during_cut']}; longest REST gap {outcome['rest_longest_gap_s']} s")
    assert not kafka.is_alive() and not rest.is_alive(), "a producer did not finish"
    assert outcome["failures"] == {"native": [], "rest": [], "kafka": []}, outcome["failures"]
    # Each kept being acknowledged through the whole cut, at about its rate (native 100/s, REST 500/s, Kafka 300/s).
    native_during, rest_during, kafka_during = outcome["acked_during_cut"]
    assert native_during > CUT_S * 50 and rest_during > CUT_S * 100 and kafka_during > CUT_S * 100, outcome["acked_during_cut"]
    # The gateway's dedup windows and rate limits worked throughout (Redis on a host of its own answered it).
    assert "unreachable" not in (plane.home / "server.log").read_text()
    missing = outcome["acked"] - outcome["consumed"]
    assert not missing, f"{len(missing)} acknowledged records never reached the group, e.g. {sorted(missing)[:5]}"


def _kafka_acked(load: KafkaLoad) -> int:
    return sum(len(values) for values in load.acked.values())
