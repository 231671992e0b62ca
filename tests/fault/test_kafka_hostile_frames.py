"""Random API keys, versions, bodies, lying lengths and truncated frames on the Kafka listener (issue 42): the broker
never crashes, its memory stays bounded, its data is unchanged, and each connection is answered or closed.

Frames go before authentication and after it (SASL/PLAIN with the operator's key first), so random bodies of the
APIs the listener serves reach kio's decoders and the handlers behind them.
"""

from __future__ import annotations

import io
import socket
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
from kio.serial import entity_writer
from tideway_server.brokers.kafka.wire import SUPPORTED

from tests.fault.test_hostile_frames import send_and_read
from tests.harness.processes import OPERATOR_KEY
from tideway.native import SyncClient, SyncProducer

RSS_GROWTH_BYTES_MAX = 64 << 20


def _header(api_key: int, version: int, correlation_id: int, flexible: bool) -> bytes:
    return struct.pack(">hhih", api_key, version, correlation_id, 4) + b"fuzz" + (b"\x00" if flexible else b"")


def _frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def _authenticate() -> bytes:
    """SaslHandshake v1 and SaslAuthenticate v2 (PLAIN, the operator's key), as raw frames."""
    handshake, authenticate = io.BytesIO(), io.BytesIO()
    entity_writer(SaslHandshakeRequest)(handshake, SaslHandshakeRequest(mechanism="PLAIN"))
    entity_writer(SaslAuthenticateRequest)(authenticate, SaslAuthenticateRequest(
        auth_bytes=b"\x00operator\x00" + OPERATOR_KEY.encode()))
    return (_frame(_header(17, 1, 1, False) + handshake.getvalue())
            + _frame(_header(36, 2, 2, True) + authenticate.getvalue()))


def _rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


@pytest.fixture(scope="module")
def kafka_broker(tmp_path_factory):
    from tests.harness.processes import BrokerProcess

    broker = BrokerProcess(tmp_path_factory.mktemp("kafka-hostile") / "b1", kafka=True).start()
    with SyncClient(broker.bootstrap) as admin:
        admin.create_topic("keep", partitions=2)
    with SyncProducer(broker.bootstrap) as producer:
        producer.send_many("keep", [b"kept %d" % i for i in range(200)], key=b"k")
    with SyncClient(broker.bootstrap) as admin:
        before = [(p.log_start_offset, p.log_end_offset, p.size_bytes) for p in admin.describe_topics(["keep"])[0].partitions]
    yield broker, before, _rss_bytes(broker.process.pid)
    broker.kill()


served = st.sampled_from(sorted(SUPPORTED))
api_keys = served | st.integers(-5, 100)
versions = st.integers(-2, 20)
kafka_frames = st.one_of(
    st.binary(max_size=300),  # noise
    st.builds(lambda k, v, c, f, body: _frame(_header(k, v, c, f) + body),
              api_keys, versions, st.integers(-(2**31), 2**31 - 1), st.booleans(), st.binary(max_size=300)),
    st.builds(lambda k, body, cut: _frame(_header(k, SUPPORTED[k][1], 3, True) + body)[:cut],  # truncated
              served, st.binary(max_size=200), st.integers(0, 60)),
    st.builds(lambda n, rest: struct.pack(">i", n) + rest, st.integers(-(2**31), 2**31 - 1), st.binary(max_size=50)),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(authenticated=st.booleans(), data=st.lists(kafka_frames, min_size=1, max_size=4))
def test_hostile_kafka_frames_never_crash_the_broker(kafka_broker, authenticated, data):
    broker, _before, _rss = kafka_broker
    send_and_read(broker.kafka_port, (_authenticate() if authenticated else b"") + b"".join(data))
    assert broker.alive(), broker.log_text()[-2000:]


def test_data_and_memory_after_hostile_kafka_input(kafka_broker):
    broker, before, rss_before = kafka_broker
    # Runs after the hypothesis test in this module (file order).
    assert broker.alive()
    with SyncClient(broker.bootstrap) as admin:
        after = [(p.log_start_offset, p.log_end_offset, p.size_bytes) for p in admin.describe_topics(["keep"])[0].partitions]
    assert after == before
    growth = _rss_bytes(broker.process.pid) - rss_before
    assert growth < RSS_GROWTH_BYTES_MAX, f"the broker grew by {growth / 1e6:.0f} MB"
    assert "Traceback" not in broker.log_text()


def test_an_oversized_kafka_frame_closes_only_that_connection(kafka_broker):
    broker, _before, _rss = kafka_broker
    with socket.create_connection(("127.0.0.1", broker.kafka_port), timeout=5) as other:
        assert send_and_read(broker.kafka_port, struct.pack(">i", 2**31 - 1) + b"\x00" * 100) == b""
        other.sendall(_frame(_header(18, 0, 42, False)))  # ApiVersions v0 on the other connection
        length, correlation_id, error_code = struct.unpack(">iih", other.recv(10))
        assert (correlation_id, error_code) == (42, 0)
