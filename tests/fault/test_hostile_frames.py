"""Random, truncated and oversized frames never crash a broker or change its data (issue 2)."""

import socket
import struct

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tideway.native import SyncClient, SyncConsumer, SyncProducer
from tideway.protocol.frames import encode_request
from tideway.protocol.messages import ApiKey


def snapshot(bootstrap: str) -> tuple:
    with SyncClient(bootstrap) as admin:
        description = [(t.name, [(p.log_start_offset, p.log_end_offset, p.size_bytes) for p in t.partitions]) for t in admin.describe_topics()]
    with SyncConsumer(bootstrap) as consumer:
        consumer.assign([("keep", 0), ("keep", 1)], start="earliest")
        values = []
        while len(values) < 300:
            batch = consumer.poll(2000)
            if not batch:
                break
            values += [(tp, r.offset, r.value) for tp, records in sorted(batch.items()) for r in records]
    return description, sorted(values)


@pytest.fixture(scope="module")
def seeded_broker(tmp_path_factory):
    from tests.harness.processes import BrokerProcess

    broker = BrokerProcess(tmp_path_factory.mktemp("hostile") / "b1").start()
    with SyncClient(broker.bootstrap) as admin:
        admin.create_topic("keep", partitions=2)
    with SyncProducer(broker.bootstrap) as producer:
        for i in range(3):
            producer.send_many("keep", [b"kept %d-%d" % (i, j) for j in range(100)], key=b"%d" % i)
    before = snapshot(broker.bootstrap)
    yield broker, before
    broker.kill()


def send_and_read(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        sock.settimeout(2)
        chunks = []
        try:
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        except (TimeoutError, ConnectionResetError):
            pass
        return b"".join(chunks)


api_keys = st.sampled_from([int(k) for k in ApiKey] + [-1, 7, 999])
msgpack_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.binary(max_size=200) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=12), children, max_size=5),
    max_leaves=20,
)
produce_like = st.fixed_dictionaries(
    {"acks": st.sampled_from([0, 1, -1, 5]), "partitions": st.lists(st.fixed_dictionaries({"topic": st.sampled_from(["keep", "x"]), "partition": st.integers(-1, 3), "records": st.binary(max_size=300)}), max_size=3)}
)
frames = st.one_of(
    st.binary(max_size=400),  # noise
    st.builds(lambda k, v, c, b: encode_request(k, v, c, b), api_keys, st.integers(-2, 2), st.integers(-(2**31), 2**31 - 1), st.binary(max_size=300)),
    st.builds(lambda k, body: encode_request(k, 0, 1, msgspec.msgpack.encode(body)), api_keys, msgpack_values),
    st.builds(lambda body: encode_request(0, 0, 1, msgspec.msgpack.encode(body)), produce_like),
    st.builds(lambda frame, cut: frame[:cut], st.builds(lambda b: encode_request(1, 0, 1, b), st.binary(min_size=10, max_size=200)), st.integers(0, 50)),  # truncated
    st.builds(lambda n, rest: struct.pack(">i", n) + rest, st.integers(-(2**31), 2**31 - 1), st.binary(max_size=50)),  # lying lengths
)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.lists(frames, min_size=1, max_size=4))
def test_hostile_frames_never_crash_the_broker(seeded_broker, data):
    broker, _before = seeded_broker
    send_and_read(broker.port, b"".join(data))
    assert broker.alive(), broker.log_text()[-2000:]


def test_stored_data_is_unchanged_after_hostile_input(seeded_broker):
    broker, before = seeded_broker
    # Runs after the hypothesis test in this module (file order).
    assert broker.alive()
    assert snapshot(broker.bootstrap) == before


def test_oversized_frame_closes_only_that_connection(seeded_broker):
    broker, _before = seeded_broker
    with socket.create_connection(("127.0.0.1", broker.port), timeout=5) as other:
        answer = send_and_read(broker.port, struct.pack(">i", 2**31 - 1) + b"\x00" * 100)
        assert answer == b""  # closed without an answer
        other.sendall(encode_request(int(ApiKey.API_VERSIONS), 0, 42, msgspec.msgpack.encode({})))
        header = other.recv(8)
        assert struct.unpack(">ii", header)[1] == 42  # the other connection still works


def test_undecodable_body_gets_invalid_request_and_keeps_the_connection(seeded_broker):
    broker, _before = seeded_broker
    with socket.create_connection(("127.0.0.1", broker.port), timeout=5) as sock:
        sock.sendall(encode_request(int(ApiKey.FETCH), 0, 7, b"\xc1not msgpack"))
        sock.sendall(encode_request(int(ApiKey.METADATA), 9, 8, msgspec.msgpack.encode({})))
        answers = {}
        buffer = b""
        while len(answers) < 2:
            buffer += sock.recv(65536)
            while len(buffer) >= 4 and len(buffer) - 4 >= struct.unpack(">i", buffer[:4])[0]:
                length = struct.unpack(">i", buffer[:4])[0]
                correlation_id = struct.unpack(">i", buffer[4:8])[0]
                answers[correlation_id] = msgspec.msgpack.decode(buffer[8 : 4 + length])
                buffer = buffer[4 + length :]
        assert answers[7]["error_code"] == 42 and "cannot decode FETCH" in answers[7]["error_message"]
        assert answers[8]["error_code"] == 35  # UNSUPPORTED_VERSION
