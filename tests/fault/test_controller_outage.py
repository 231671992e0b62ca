"""The data plane holds without the controller (issue 40).

Rule: brokers go on authenticating the tenant keys they have checked while the controller is away (a bounded
staleness, ``--credentials-outage-max-s``), clients retry every retriable error instead of failing the batch,
and a key revoked during the outage stops working within a few seconds of the controller's return.

Real processes: a controller, three brokers, the API (tenants, keys) and Redis. A tenant's native producers
(idempotent acks=all, and a plain acks=1 one) and a group consumer run with the tenant's key; the controller is
SIGKILLed for 30 s, during which a second key of the tenant, in use on an open connection, is revoked through
the REST API. Before the issue, sends failed for good with "cannot check the API key right now (NOT_CONTROLLER):
retry" 4.5 s into the outage.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.harness.processes import wait_for_port
from tideway.native import GroupConsumer, Producer, TidewayClient
from tideway.native.conn import connect
from tideway.native.credentials import ApiKey
from tideway.protocol import errors
from tideway.protocol import messages as m
from tideway.protocol.messages import ApiKey as Api

pytestmark = pytest.mark.timeout(300)

OUTAGE_S = 30
PARTITIONS = 3
REVOKED_WITHIN_S = 5  # of the controller listening again


@pytest.fixture(scope="module")
def plane(tmp_path_factory):
    from tests.harness.control_plane import running_control_plane

    home = tmp_path_factory.mktemp("outage")
    with running_control_plane(home, f"sqlite://{home}/control.sqlite3") as plane:
        yield plane


class Sender:
    """Sends a record every 10 ms, round robin over the partitions, and records every outcome."""

    def __init__(self, producer: Producer, name: str, label: str) -> None:
        self.producer, self.name, self.label = producer, name, label
        self.acked: set[bytes] = set()
        self.failures: list[BaseException] = []
        self.pending: set[asyncio.Task] = set()
        self.stop = asyncio.Event()

    async def run(self) -> None:
        sequence = 0
        while not self.stop.is_set():
            value = b"%s-%07d" % (self.label.encode(), sequence)
            future = await self.producer.send(self.name, value, partition=sequence % PARTITIONS)
            sequence += 1
            task = asyncio.ensure_future(self._outcome(value, future))
            self.pending.add(task)
            task.add_done_callback(self.pending.discard)
            await asyncio.sleep(0.01)
        await asyncio.gather(*self.pending)

    async def _outcome(self, value: bytes, future) -> None:
        try:
            await future
        except Exception as exc:  # noqa: BLE001 - every failure is what the test counts
            self.failures.append(exc)
        else:
            self.acked.add(value)


def test_a_controller_outage_fails_no_send_and_a_key_revoked_meanwhile_stops_soon_after(plane):
    _slug, key = plane.create_tenant(plan="team")
    with plane.client(key) as api:
        made = api.post("/api/v1/queues/", json={"name": "orders", "mode": "stream", "partitions": PARTITIONS,
                                                 "replication_factor": 3})
        assert made.status_code == 201, made.text
        doomed = api.post("/api/v1/keys/", json={"name": "doomed", "scopes": ["produce", "consume"]}).json()
    bootstrap = plane.deployment.bootstrap
    controller = plane.deployment.controllers[0]
    outcome: dict = {}

    async def scenario() -> None:
        consumed: set[bytes] = set()
        async with Producer(bootstrap, api_key=key, acks="all", linger_ms=5) as idempotent, \
                Producer(bootstrap, api_key=key, acks=1, linger_ms=5) as plain, \
                TidewayClient(bootstrap, api_key=key) as consumer_client:
            senders = [Sender(idempotent, "orders", "idem"), Sender(plain, "orders", "plain")]
            tasks = [asyncio.ensure_future(s.run()) for s in senders]
            member = GroupConsumer(consumer_client, "workers", ["orders"], auto_offset_reset="earliest")
            await member.start()
            reading = True

            async def read() -> None:
                while reading:
                    for records in (await member.getmany(timeout_ms=200)).values():
                        consumed.update(r.value for r in records)

            reader = asyncio.ensure_future(read())
            doomed_connection = await connect("127.0.0.1", plane.deployment.brokers[1].port, credentials=ApiKey(doomed["key"]))
            metadata = m.MetadataRequest(topics=["orders"])
            assert (await doomed_connection.request(Api.METADATA, metadata)).topics[0].name == "orders"
            await asyncio.sleep(3)

            controller.kill()
            killed_at = time.monotonic()
            consumed_at_kill = len(consumed)
            await asyncio.sleep(OUTAGE_S / 2)
            with plane.client(key) as api:  # the REST API works without the controller: the database does
                assert api.delete(f"/api/v1/keys/{doomed['prefix']}").status_code == 200
            # The doomed key's open connection still works: the broker cannot learn of the revocation yet.
            assert (await doomed_connection.request(Api.METADATA, metadata)).topics[0].name == "orders"
            await asyncio.sleep(OUTAGE_S - (time.monotonic() - killed_at))
            outcome["consumed_during_outage"] = len(consumed) - consumed_at_kill
            outcome["failures_during_outage"] = [f for s in senders for f in s.failures]

            await asyncio.to_thread(controller.start, migrate=False)
            back_at = time.monotonic()
            refused_after = None
            while time.monotonic() - back_at < 30:
                try:
                    await doomed_connection.request(Api.METADATA, metadata)
                except errors.SaslAuthenticationFailedError:
                    refused_after = time.monotonic() - back_at
                    break
                await asyncio.sleep(0.1)
            outcome["refused_after_s"] = refused_after
            await asyncio.sleep(3)
            for sender in senders:
                sender.stop.set()
            await asyncio.gather(*tasks)
            acked = set().union(*(s.acked for s in senders))
            deadline = time.monotonic() + 30
            while not acked <= consumed and time.monotonic() < deadline:
                await asyncio.sleep(0.2)
            reading = False
            await reader
            await member.stop()
            doomed_connection.close()
            outcome.update(acked=acked, consumed=consumed, failures=[f for s in senders for f in s.failures],
                           per_sender=[len(s.acked) for s in senders])

    asyncio.run(scenario())
    assert outcome["failures"] == [], outcome["failures"][:5]
    assert all(count > OUTAGE_S * 50 for count in outcome["per_sender"]), outcome["per_sender"]  # they kept sending
    assert outcome["consumed_during_outage"] > OUTAGE_S * 50, outcome["consumed_during_outage"]  # consumption went on
    assert outcome["acked"] <= outcome["consumed"], len(outcome["acked"] - outcome["consumed"])  # nothing acked was lost
    assert outcome["refused_after_s"] is not None and outcome["refused_after_s"] <= REVOKED_WITHIN_S, outcome["refused_after_s"]
    # A connection with the revoked key is refused outright now.
    with pytest.raises(errors.SaslAuthenticationFailedError):
        asyncio.run(connect("127.0.0.1", plane.deployment.brokers[2].port, credentials=ApiKey(doomed["key"])))
    wait_for_port(controller.port)
