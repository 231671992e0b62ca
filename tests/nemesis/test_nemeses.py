"""One round per nemesis on hosts of their own (issue 45; tests/nemesis/rounds.py says what each does).

Each round runs an idempotent acks=all producer and a consumer group member through the fault and checks, once
healed: no send failed, 0 acknowledged records lost, 0 stored twice, every partition in the order sent, every
replica byte-identical, the group got every acknowledged record, and no partition went without an acknowledged
write longer than the session timeout + 3 s (where a majority side with the controller existed).

Jepsen's analyses of Kafka, RabbitMQ, NATS and Redpanda were about these cases: a leader cut off from the
controller and its followers but not from its clients must stop acknowledging acks=all writes (it cannot reach
min.insync.replicas), and none of the writes it acknowledged may vanish when it returns as a follower.
bench/nemesis.py runs many rounds of each.
"""

from __future__ import annotations

import asyncio

import pytest

from tests.harness import hosts
from tests.nemesis.cluster import start_hosted_cluster
from tests.nemesis.rounds import NEMESES, run_round

pytestmark = [pytest.mark.timeout(300), pytest.mark.skipif(hosts.available() is not None,
                                                            reason=str(hosts.available()))]


@pytest.mark.parametrize("name", list(NEMESES))
async def test_a_round_of(name, tmp_path):
    nemesis = NEMESES[name]
    with hosts.Network() as network:
        cluster = await asyncio.to_thread(start_hosted_cluster, tmp_path, network, slow_links=nemesis.slow_links)
        figures, problems = await run_round(cluster, nemesis)
    print(f"round {figures}")
    assert not problems, f"{nemesis.what}: {problems}; {figures}"
