"""Brokers authenticate and authorise every caller on every port (issue 14).

A whole deployment (controller, 3 brokers, `tideway serve`) with two tenants.
Tenant A owns a queue and a stream with messages, committed offsets and queue
state; then every API of the native protocol, taken from the protocol's own
table (``REQUEST_TYPES``, so a new API is covered without touching this
test), is sent over a broker's client listener with: no credentials, a wrong
key, a revoked key, tenant B's key naming A's things, a produce-only key of A
consuming, a key of A outside its queue patterns, and A's key calling the
internal APIs. Each is refused with its typed error, and A's stored data
(log end offsets, committed offsets, queue state, topic list) is the same
before and after. Forged internal requests (CLUSTER_STATE, ALTER_ISR,
replica fetches, controller RPCs) without the cluster secret are refused on
both listeners and on the controller. Fifty unauthenticated connections
declaring 100 MiB frames cost the broker almost no memory.

Why one file of ~600 lines: every port and API against every kind of caller, in one table-driven sweep.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
import types
import typing

import msgspec
import pytest
from tideway_server.brokers.server.authorizer import ACCESS, Access

from tests.harness.processes import OPERATOR_KEY
from tideway.native import TidewayClient
from tideway.native.conn import connect
from tideway.native.credentials import ApiKey, ClusterPeer
from tideway.protocol import errors
from tideway.protocol import messages as m
from tideway.protocol.messages import ApiKey as Api
from tideway.record.batch import BatchBuilder

SAMPLE_BATCH = BatchBuilder()
SAMPLE_BATCH.append(1, None, b"forged")
RECORDS = SAMPLE_BATCH.build()

SASL_FAILED = errors.SaslAuthenticationFailedError.errno
TOPIC_DENIED = errors.TopicAuthorizationFailedError.errno
GROUP_DENIED = errors.GroupAuthorizationFailedError.errno
DENIED = errors.AuthorizationFailedError.errno
UNSUPPORTED = errors.UnsupportedVersionError.errno
TXN_DENIED = errors.TransactionalIdAuthorizationFailedError.errno
ANY_REFUSAL = {SASL_FAILED, TOPIC_DENIED, GROUP_DENIED, DENIED, UNSUPPORTED, TXN_DENIED}
# Transaction APIs that name no queue (a key's queue patterns do not limit its transactional ids): answered, with
# nothing outside the key's patterns in the answer.
NAMING_NO_QUEUE = {"INIT_PRODUCER_ID", "END_TXN", "ADD_OFFSETS_TO_TXN", "DESCRIBE_TRANSACTIONS", "LIST_TRANSACTIONS"}


# -- a sample of every request, filled from its type -------------------------------------------


def sample(cls: type[msgspec.Struct], *, topic: str, group: str, replica: bool = False,
           txn: str = "x") -> msgspec.Struct:
    """An instance of request type ``cls`` with every field set, naming ``topic``, ``group`` and the transactional
    id ``txn``.

    Lists get one element, names the given topic or group, epochs a large value (a forger
    would claim the newest), waits zero.
    """
    hints = typing.get_type_hints(cls)
    values = {}
    for field in msgspec.structs.fields(cls):
        values[field.name] = _value(field.name, hints[field.name], topic=topic, group=group, replica=replica, txn=txn)
    return cls(**values)


def _value(name: str, hint, *, topic: str, group: str, replica: bool, txn: str = "x"):
    origin = typing.get_origin(hint)
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if origin in (typing.Union, types.UnionType):
        return _value(name, args[0], topic=topic, group=group, replica=replica, txn=txn)
    if origin is list:
        return [_value(name, args[0], topic=topic, group=group, replica=replica, txn=txn)]
    if origin is tuple:
        return tuple(_value(name, a, topic=topic, group=group, replica=replica, txn=txn) for a in args)
    if origin is dict:
        return {}
    if isinstance(hint, type) and issubclass(hint, msgspec.Struct):
        return sample(hint, topic=topic, group=group, replica=replica, txn=txn)
    if hint is bool:
        return False
    if hint is bytes:
        return RECORDS if name == "records" else b""
    if hint is int:
        if name == "replica_id":
            return 2 if replica else -1
        if "epoch" in name:
            return 1_000_000
        if name in ("max_wait_ms", "lock_ms", "delay_ms"):
            return 0
        if name in ("count", "max_records", "partitions", "replication_factor", "partition_max_bytes", "max_bytes",
                    "min_bytes", "timeout_ms"):
            return 5_000 if "ms" in name else 8
        if name in ("acks", "answers_max"):
            return 1
        return 0
    if hint is str:
        if name in ("topic", "name", "names", "topics", "deleted_topics", "new_isr"):
            return topic
        if name == "group_id":
            return group
        if name in ("transactional_id", "transactional_ids"):
            return txn
        if name == "group_type":
            return ""
        if name == "action":
            return "accept"
        if name == "mechanism":
            return "PLAIN"
        if name == "host":
            return "127.0.0.1"
        return "x"
    raise AssertionError(f"no sample value for {name}: {hint}")


# -- the deployment ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    """Tenants A and B on a deployment of their own (SQLite: the broker side is what is under test)."""
    from tests.harness.control_plane import running_control_plane

    home = tmp_path_factory.mktemp("security")
    with running_control_plane(home, f"sqlite://{home}/control.sqlite3") as plane:
        yield plane


@pytest.fixture(scope="module")
def tenants(deployment):
    made = {}
    for label in ("a", "b"):
        slug, key = deployment.create_tenant(plan="team")
        with deployment.client(key) as api:
            assert api.post("/api/v1/queues/", json={"name": "orders", "mode": "queue", "replication_factor": 3}).status_code == 201
            assert api.post("/api/v1/queues/", json={"name": "events", "mode": "stream", "replication_factor": 3}).status_code == 201
            keys = {
                "produce_only": api.post("/api/v1/keys/", json={"name": "p", "scopes": ["produce"]}).json()["key"],
                "other_queues": api.post("/api/v1/keys/", json={"name": "o", "scopes": ["produce", "consume", "manage"],
                                                                "queue_patterns": ["other-*"]}).json()["key"],
                "revoked": api.post("/api/v1/keys/", json={"name": "r", "scopes": ["produce", "consume"]}).json(),
            }
        made[label] = {"slug": slug, "key": key, **keys}
    # Tenant ids are never shown to tenants: read them from the broker-side names (A was created first).
    ids = asyncio.run(_tenant_ids(deployment.deployment.bootstrap))
    assert len(ids) == 2
    made["a"]["id"], made["b"]["id"] = ids
    return made


async def _tenant_ids(bootstrap: str) -> list[int]:
    async with TidewayClient(bootstrap, api_key=OPERATOR_KEY) as client:
        return sorted({int(t[1:].split(".")[0]) for t in await client.list_topics() if t.endswith(".orders")})


async def _fill_tenant_a(key: str, bootstrap: str) -> None:
    """Messages in A's queue and stream, a committed offset, a queue message acquired and acked (natively, with A's key)."""
    from tideway.native import GroupConsumer, Producer, QueueConsumer

    async with TidewayClient(bootstrap, api_key=key) as client:
        assert await client.list_topics() == ["events", "orders", "orders.dlq"]  # its own names, nothing else
        producer = Producer(client, acks="all")
        await producer.start()
        for i in range(20):
            await producer.send("events", b"event %d" % i)
            await producer.send("orders", b"order %d" % i)
        await producer.flush()
        await producer.stop()
        member = GroupConsumer(client, "g1", ["events"], auto_offset_reset="earliest", enable_auto_commit=False)
        await member.start()
        seen = 0
        deadline = time.monotonic() + 30
        while seen < 5 and time.monotonic() < deadline:
            batch = await member.getmany(timeout_ms=500)
            seen += sum(len(records) for records in batch.values())
        await member.commit()
        await member.stop()
        async with QueueConsumer(client, "w1", "orders") as queue:
            messages = await queue.receive(5, wait_ms=5000)
            assert messages
            await queue.ack(messages[:3])


async def _state_of_a(bootstrap: str, tenant_id: int) -> dict:
    """A's stored data, read with the operator's service key by broker-side names."""
    from tideway.native.group import describe_group

    prefix = f"t{tenant_id}."
    async with TidewayClient(bootstrap, api_key=OPERATOR_KEY) as client:
        topics = sorted(t for t in await client.list_topics() if t.startswith(prefix))
        ends = {}
        for topic in topics:
            for info in await client.partitions_for(topic):
                ends[(topic, info.partition)] = (await client.list_offset(topic, info.partition, m.LATEST_TIMESTAMP))[0]
        stream = await describe_group(client, f"{prefix}stream.g1")
        queue = await describe_group(client, f"{prefix}queue.w1")
    return {
        "topics": topics,
        "ends": ends,
        "offsets": [(o.topic, o.partition, o.offset) for o in stream.offsets],
        "queue": [msgspec.structs.asdict(s) for s in queue.share_partitions],
    }


async def _send(port: int, api: Api, request, *, credentials=None) -> tuple[int, str, object]:
    """(error code, message, response) of one request on a fresh connection (code 0: answered without error)."""
    try:
        connection = await connect("127.0.0.1", port, timeout_s=5, credentials=credentials)
    except errors.BrokerError as exc:
        return exc.errno, exc.message, None
    try:
        response = await connection.request(api, request, timeout_s=10)
        return 0, "", response
    except errors.BrokerError as exc:
        return exc.errno, exc.message, None
    finally:
        connection.close()


def _names_in(response) -> str:
    return "" if response is None else msgspec.json.encode(response).decode(errors="replace")


def test_every_api_has_an_access_rule():
    """A new API must be classified before anyone can call it (the authorizer refuses unclassified ones)."""
    assert set(m.REQUEST_TYPES) <= set(ACCESS)


def test_every_api_refuses_every_caller_it_must_and_changes_nothing(deployment, tenants):
    a, b = tenants["a"], tenants["b"]
    broker = deployment.deployment.brokers[1]
    bootstrap = deployment.deployment.bootstrap
    asyncio.run(_fill_tenant_a(a["key"], bootstrap))
    before = asyncio.run(_state_of_a(bootstrap, a["id"]))
    assert before["offsets"] and before["queue"] and len(before["topics"]) == 3

    with deployment.client(a["key"]) as api:
        assert api.delete(f"/api/v1/keys/{a['revoked']['prefix']}").status_code == 200
    a_topic = f"t{a['id']}.orders"
    cases = {
        "no credentials": (None, "orders", "g1"),
        "wrong key": (ApiKey("tw_0123456789ab_not-the-secret"), "orders", "g1"),
        "revoked key": (ApiKey(a["revoked"]["key"]), "orders", "g1"),
        "tenant B naming A's topic and group": (ApiKey(b["key"]), a_topic, f"t{a['id']}.stream.g1"),
        "produce-only key consuming": (ApiKey(a["produce_only"]), "orders", "g1"),
        "key outside its patterns": (ApiKey(a["other_queues"]), "orders", "g1"),
    }
    # What each key may do (not sent: a produce would change A's log, as it should).
    allowed = {"produce-only key consuming": {Api.PRODUCE, Api.METADATA, Api.LIST_OFFSETS, Api.OFFSET_FOR_LEADER_EPOCH,
                                              Api.DESCRIBE_TOPICS, Api.DESCRIBE_TRAFFIC, Api.INIT_PRODUCER_ID,
                                              Api.ADD_PARTITIONS_TO_TXN, Api.END_TXN, Api.DESCRIBE_TRANSACTIONS,
                                              Api.LIST_TRANSACTIONS}}
    time.sleep(5)  # the revocation reaches the brokers within 5 s
    failures = []

    async def walk() -> None:
        for case, (credentials, topic, group) in cases.items():
            for api, cls in m.REQUEST_TYPES.items():
                if ACCESS[api] is Access.ANYONE or api in allowed.get(case, ()):
                    continue
                txn = f"t{a['id']}.txn.x" if case.startswith("tenant B") else "x"  # B names A's transactional id
                request = sample(cls, topic=topic, group=group, txn=txn)
                code, message, response = await _send(broker.port, api, request, credentials=credentials)
                if code in ANY_REFUSAL:
                    continue
                if case == "key outside its patterns" and (api in (Api.FIND_COORDINATOR, Api.DESCRIBE_GROUP)
                                                           or api.name in NAMING_NO_QUEUE):
                    # Names no queue: answered, but nothing outside the key's patterns is in the answer.
                    if "orders" not in _names_in(response) and "events" not in _names_in(response):
                        continue
                if case.startswith("tenant B") and api is Api.LIST_TRANSACTIONS and f"t{a['id']}." not in _names_in(
                        response) and "orders" not in _names_in(response):
                    continue  # names nothing: B's own transactions, none of A's
                failures.append(f"{case}: {api.name} got {code} {message!r}: {_names_in(response)[:200]}")

    asyncio.run(walk())
    assert not failures, "\n".join(failures)
    assert asyncio.run(_state_of_a(bootstrap, a["id"])) == before


def test_tenant_keys_are_refused_on_internal_apis(deployment, tenants):
    """A's own key, on the client listener: every internal API answers AUTHORIZATION_FAILED (or is not served there)."""
    a = tenants["a"]
    broker = deployment.deployment.brokers[1]

    async def walk() -> list[str]:
        failures = []
        internal = [api for api, access in ACCESS.items() if access in (Access.INTERNAL, Access.OPERATOR)]
        for api in internal:
            request = sample(m.REQUEST_TYPES[api], topic=f"t{a['id']}.orders", group="g1")
            code, message, _ = await _send(broker.port, api, request, credentials=ApiKey(a["key"]))
            if code not in (DENIED, UNSUPPORTED):
                failures.append(f"{api.name}: {code} {message}")
        replica_fetch = sample(m.FetchRequest, topic="orders", group="g1", replica=True)
        code, message, _ = await _send(broker.port, Api.FETCH, replica_fetch, credentials=ApiKey(a["key"]))
        if code != DENIED:
            failures.append(f"replica FETCH: {code} {message}")
        return failures

    assert asyncio.run(walk()) == []


def test_forged_internal_requests_are_refused_on_both_listeners_and_the_controller(deployment, tenants):
    a = tenants["a"]
    cluster = deployment.deployment
    bootstrap = cluster.bootstrap
    before = asyncio.run(_state_of_a(bootstrap, a["id"]))
    topic = f"t{a['id']}.orders"
    wrong_secret = ClusterPeer(os.urandom(32), identity="forger")
    operator = ApiKey(OPERATOR_KEY)
    forged = {
        Api.CLUSTER_STATE: sample(m.ClusterStateRequest, topic=topic, group="g"),
        Api.ALTER_ISR: sample(m.AlterIsrRequest, topic=topic, group="g"),
        Api.FETCH: sample(m.FetchRequest, topic=topic, group="g", replica=True),
        Api.BROKER_REGISTER: sample(m.BrokerRegisterRequest, topic=topic, group="g"),
        Api.DESCRIBE_CREDENTIAL: sample(m.DescribeCredentialRequest, topic=topic, group="g"),
    }
    controller_rpcs = {
        **forged,
        Api.DESCRIBE_CLUSTER: m.DescribeClusterRequest(),
        Api.DELETE_TOPICS: m.DeleteTopicsRequest(names=[topic]),
    }

    async def attempts() -> list[str]:
        failures = []
        for broker in cluster.brokers.values():
            for port, where in ((broker.port, "client"), (broker.internal_port, "internal")):
                for credentials, who in ((None, "anonymous"), (wrong_secret, "wrong secret"), (operator, "service key")):
                    for api, request in forged.items():
                        code, message, _ = await _send(port, api, request, credentials=credentials)
                        if code not in ANY_REFUSAL:
                            failures.append(f"broker {broker.broker_id} {where} {who} {api.name}: {code} {message}")
        controller = cluster.controllers[0]
        for credentials, who in ((None, "anonymous"), (wrong_secret, "wrong secret"), (ApiKey(a["key"]), "tenant key")):
            for api, request in controller_rpcs.items():
                code, message, _ = await _send(controller.port, api, request, credentials=credentials)
                if code not in ANY_REFUSAL:
                    failures.append(f"controller {who} {api.name}: {code} {message}")
        # A service key may describe the cluster, never act as a broker.
        for api in (Api.BROKER_REGISTER, Api.ALTER_ISR, Api.DESCRIBE_CREDENTIAL):
            code, message, _ = await _send(controller.port, api, controller_rpcs[api], credentials=operator)
            if code != DENIED:
                failures.append(f"controller service key {api.name}: {code} {message}")
        return failures

    assert asyncio.run(attempts()) == []
    assert asyncio.run(_state_of_a(bootstrap, a["id"])) == before


def test_a_revoked_key_stops_working_on_an_open_connection_within_5_s(deployment, tenants):
    """The key works on an open connection; five seconds after it is revoked, that connection is refused (and closed)."""
    a = tenants["a"]
    broker = deployment.deployment.brokers[1]
    with deployment.client(a["key"]) as api:
        made = api.post("/api/v1/keys/", json={"name": "soon revoked", "scopes": ["consume"]}).json()

    async def run() -> None:
        connection = await connect("127.0.0.1", broker.port, credentials=ApiKey(made["key"]))
        try:
            request = m.MetadataRequest(topics=["orders"])
            assert (await connection.request(Api.METADATA, request)).topics[0].name == "orders"
            with deployment.client(a["key"]) as api:
                assert api.delete(f"/api/v1/keys/{made['prefix']}").status_code == 200
            await asyncio.sleep(5.0)  # what the API promises
            with pytest.raises(errors.SaslAuthenticationFailedError):
                await connection.request(Api.METADATA, request)
        finally:
            connection.close()

    asyncio.run(run())
    code, _, _ = asyncio.run(_send(broker.port, Api.METADATA, m.MetadataRequest(), credentials=ApiKey(made["key"])))
    assert code == SASL_FAILED


def _rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_fifty_unauthenticated_100_mib_frames_cost_almost_nothing(deployment, tenants):
    broker = deployment.deployment.brokers[2]
    before = _rss_bytes(broker.process.pid)
    sockets = []
    for _ in range(50):
        sock = socket.create_connection(("127.0.0.1", broker.port))
        sockets.append(sock)
        # A request header declaring a 100 MiB frame, then 1 MiB of its body (the broker may hang up first).
        try:
            sock.sendall((100 << 20).to_bytes(4, "big") + b"\x00" * (1 << 20))
        except OSError:
            pass
    time.sleep(1.0)
    after = _rss_bytes(broker.process.pid)
    for sock in sockets:
        sock.close()
    assert after - before < 20 << 20, f"RSS grew by {(after - before) >> 20} MiB"

    async def still_serves() -> list[str]:
        async with TidewayClient(broker.bootstrap, api_key=tenants["a"]["key"]) as client:
            return await client.list_topics()

    assert "orders" in asyncio.run(still_serves())


def _authenticated_socket(port: int, key: str) -> socket.socket:
    """A raw socket that has authenticated with ``key`` (PLAIN), for writing frames byte by byte."""
    from tideway.protocol import handshake
    from tideway.protocol.frames import encode_request

    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    for correlation_id, api, request in (
            (1, Api.SASL_HANDSHAKE, m.SaslHandshakeRequest(mechanism=handshake.PLAIN_MECHANISM)),
            (2, Api.SASL_AUTHENTICATE, m.SaslAuthenticateRequest(mechanism=handshake.PLAIN_MECHANISM,
                                                                 auth_bytes=handshake.encode_plain(key)))):
        sock.sendall(encode_request(int(api), 0, correlation_id, m.ENCODER.encode(request)))
        answer = _read_answer(sock)
        assert m.RESPONSE_DECODERS[api].decode(answer[4:]).error_code == 0
    return sock


def _read_answer(sock: socket.socket) -> bytes:
    """One response frame (after its length)."""
    def exactly(count: int) -> bytes:
        data = b""
        while len(data) < count:
            chunk = sock.recv(count - len(data))
            assert chunk, "the broker closed the connection"
            data += chunk
        return data

    return exactly(int.from_bytes(exactly(4), "big"))


def test_an_authenticated_tenants_partial_frames_hold_no_more_than_its_share(deployment, tenants):
    """Issue 40: four partial 60 MiB frames with a valid key raised a broker's RSS by 240 MB, kept while idle.
    With the default budget (256 MiB in all, 64 MiB per key) eight of them hold one frame's worth; the others
    are read past and, once complete, answered BROKER_BUSY; other tenants (and the same key's small requests)
    are served meanwhile."""
    from tideway.protocol.frames import REQUEST_HEADER_BYTES

    broker = deployment.deployment.brokers[3]
    a, b = tenants["a"], tenants["b"]
    size = 60 << 20
    header = (REQUEST_HEADER_BYTES + size).to_bytes(4, "big") + int(Api.PRODUCE).to_bytes(2, "big") + b"\x00\x00"
    before = _rss_bytes(broker.process.pid)
    sockets = [_authenticated_socket(broker.port, a["key"]) for _ in range(8)]
    try:
        for number, sock in enumerate(sockets):
            sock.sendall(header + (100 + number).to_bytes(4, "big"))
            for _ in range(60):
                sock.sendall(b"\x00" * (1 << 20) if _ < 59 else b"\x00" * ((1 << 20) - 1))  # all but the last byte
        time.sleep(1.0)
        during = _rss_bytes(broker.process.pid)

        async def served() -> tuple[list[str], list[str], int]:
            async with TidewayClient(broker.bootstrap, api_key=b["key"]) as other, \
                    TidewayClient(broker.bootstrap, api_key=a["key"]) as same:
                return await other.list_topics(), await same.list_topics(), len(await other.describe_topics(["events"]))

        topics_b, topics_a, described = asyncio.run(served())
        assert "orders" in topics_b and "orders" in topics_a and described == 1
        # A refused frame, completed, gets its typed answer; the connection stays usable.
        refused = [sock for sock in sockets[1:]]
        refused[0].sendall(b"\x00")
        answer = _read_answer(refused[0])
        assert int.from_bytes(answer[:4], "big") == 101
        error = m.RESPONSE_DECODERS[Api.PRODUCE].decode(answer[4:])
        assert error.error_code == errors.BrokerBusyError.errno, error
    finally:
        for sock in sockets:
            sock.close()
    grown = during - before
    print(f"RSS grew by {grown >> 20} MiB")
    assert grown < (64 << 20) + (16 << 20), f"RSS grew by {grown >> 20} MiB with 8 partial 60 MiB frames"
    assert grown < 256 << 20


def test_a_keys_connections_to_a_broker_follow_its_plan(deployment):
    """Issue 40: 1,000 connections were allowed per key whatever the plan; the free plan allows 20 per broker."""
    _slug, key = deployment.create_tenant(plan="free")
    broker = deployment.deployment.brokers[1]

    async def open_many() -> tuple[int, errors.BrokerError | None]:
        opened, refusal = [], None
        try:
            for _ in range(21):
                try:
                    opened.append(await connect("127.0.0.1", broker.port, credentials=ApiKey(key)))
                except errors.BrokerError as exc:
                    refusal = exc
                    break
            return len(opened), refusal
        finally:
            for connection in opened:
                connection.close()

    count, refusal = asyncio.run(open_many())
    assert count == 20 and isinstance(refusal, errors.SaslAuthenticationFailedError), (count, refusal)
    assert "too many connections" in refusal.message


def test_a_request_that_never_arrives_whole_is_cut_off(tmp_path):
    """A partial frame holds its connection for --request-read-timeout-ms at most."""
    from tests.harness.processes import BrokerProcess
    from tideway.protocol.frames import REQUEST_HEADER_BYTES

    broker = BrokerProcess(tmp_path / "b", extra_args=["--request-read-timeout-ms", "1000"]).start()
    try:
        from tests.harness.processes import OPERATOR_KEY

        sock = _authenticated_socket(broker.port, OPERATOR_KEY)
        sock.sendall((REQUEST_HEADER_BYTES + (1 << 20)).to_bytes(4, "big") + b"\x00" * 1000)
        sock.settimeout(10)
        started = time.monotonic()
        assert sock.recv(1) == b""  # closed by the broker
        assert time.monotonic() - started < 5
        assert "request_read_timeout" in broker.log_text() or "has not arrived whole" in broker.log_text()
    finally:
        broker.kill()


def test_tenants_never_see_broker_side_names_in_errors_or_dead_letter_headers(deployment, tenants):
    """A's key natively: errors about its topics and its dead letters' origin headers name `orders`, never `t<id>.orders`."""
    from tideway.native import Consumer, Producer, QueueConsumer

    a = tenants["a"]
    prefix = f"t{a['id']}."

    async def run() -> tuple[list[str], dict]:
        texts = []
        async with TidewayClient(deployment.deployment.bootstrap, api_key=a["key"]) as client:
            await client.partitions_for("orders")
            leader = await client.connection(client.leader_for("orders", 0))
            for request, api in ((m.FetchRequest(partitions=[m.FetchPartition(topic="orders", partition=99, fetch_offset=0)]), Api.FETCH),
                                 (m.ListOffsetsRequest(partitions=[m.ListOffsetsPartition(topic="orders", partition=0, timestamp=-7)]), Api.LIST_OFFSETS)):
                try:
                    response = await leader.request(api, request)
                    texts += [p.error_message for p in response.partitions]
                except errors.BrokerError as exc:
                    texts.append(exc.message)
            async with Producer(client, acks="all") as producer:
                await producer.send_and_wait("orders", b"poison")
            async with QueueConsumer(client, "dead-letter-check", "orders") as queue:
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:
                    messages = [msg for msg in await queue.receive(100, wait_ms=2000) if msg.value == b"poison"]
                    if messages:
                        await queue.reject(messages, error="cannot parse")
                        break
            consumer = Consumer(client)
            await consumer.start()
            partitions = await client.partitions_for("orders.dlq")
            await consumer.assign([("orders.dlq", p.partition) for p in partitions], start="earliest")
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                for records in (await consumer.getmany(timeout_ms=1000)).values():
                    for record in records:
                        if record.value == b"poison":
                            await consumer.stop()
                            return texts, dict(record.headers)
            await consumer.stop()
        raise AssertionError("the rejected message never reached orders.dlq")

    texts, headers = asyncio.run(run())
    assert texts and all(text and prefix not in text for text in texts), texts
    assert any("orders" in text for text in texts), texts
    assert headers["tideway-dlq-origin-topic"] == b"orders"
    assert headers["tideway-dlq-group"] == b"dead-letter-check"


def test_traffic_counts_a_tenants_messages_once_and_shows_only_its_own(deployment, tenants):
    """DESCRIBE_TRAFFIC with tenant keys: A's produce and queue deliveries counted exactly once (a queue
    coordinator's reads from remote leaders are not deliveries), in A's names; B sees none of it."""
    from tideway.native import Producer, QueueConsumer
    from tideway.native.group import group_positions
    from tideway.native.traffic import describe_traffic

    a, b = tenants["a"], tenants["b"]
    bootstrap = deployment.deployment.bootstrap
    with deployment.client(a["key"]) as api:
        created = api.post("/api/v1/queues/", json={"name": "metered", "mode": "queue", "partitions": 3,
                                                     "replication_factor": 1})
        assert created.status_code == 201, created.text

    async def run() -> None:
        async with TidewayClient(bootstrap, api_key=a["key"]) as client:
            async with Producer(client, acks="all") as producer:
                for i in range(12):
                    await producer.send("metered", b"metered %d" % i, partition=i % 3)
            received = []
            async with QueueConsumer(client, "metering", "metered") as queue:
                deadline = time.monotonic() + 30
                while len(received) < 12 and time.monotonic() < deadline:
                    messages = await queue.receive(12, wait_ms=1000)
                    await queue.ack(messages)
                    received += messages
            assert sorted(message.value for message in received) == sorted(b"metered %d" % i for i in range(12))
            seen = await describe_traffic(client, ["metered"], history_scope="t999.")  # asks for another scope
            assert seen.missing == []
            messages_in, bytes_in, messages_out, bytes_out = seen.topics["metered"]
            assert (messages_in, messages_out) == (12, 12)
            assert bytes_in > 12 * len(b"metered 0") and bytes_out >= 12 * len(b"metered 0")
            listed = await group_positions(client, "metered")  # the console's view of a queue's groups, with A's key
            assert [(g.group_id, g.group_type) for g in listed] == [("metering", "queue")]
            assert {(p.topic, p.partition) for p in listed[0].positions} == {("metered", 0), ("metered", 1), ("metered", 2)}
            totals = [sum(minute[i] for minute in seen.history.values()) for i in range(4)]
            assert totals[0] >= 12 and totals[2] >= 12  # its own whole tenant (with what other tests sent)
        async with TidewayClient(bootstrap, api_key=b["key"]) as client:
            theirs = await describe_traffic(client, ["metered"], history_scope=f"t{a['id']}.")
            assert theirs.topics == {"metered": [0, 0, 0, 0]} and theirs.history == {}
        limited = await _send(deployment.deployment.brokers[1].port, Api.DESCRIBE_TRAFFIC,
                              m.DescribeTrafficRequest(topics=[], history_scope=""), credentials=ApiKey(a["other_queues"]))
        assert limited[0] == TOPIC_DENIED  # a key limited to some queues may not read the tenant's whole history
        unmetered = m.FetchRequest(replica_id=m.INSPECTOR, partitions=[
            m.FetchPartition(topic="metered", partition=0, fetch_offset=0, partition_max_bytes=1 << 16)])
        inspecting = await _send(deployment.deployment.brokers[1].port, Api.FETCH, unmetered, credentials=ApiKey(a["key"]))
        assert inspecting[0] == DENIED  # a tenant cannot read without being metered

    asyncio.run(run())
