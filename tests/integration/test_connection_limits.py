"""Every connection count is bounded, and a refusal is logged and counted (issue 14).

A broker with small limits: a principal past its connection limit is refused
at authentication, connections past the unauthenticated limit are closed at
once, a connection that never authenticates is closed after the timeout, and
each refusal shows in the broker's log and its metrics.
"""

from __future__ import annotations

import asyncio
import socket
import urllib.request

import pytest

from tests.harness.processes import free_port
from tests.harness.waiting import wait_until
from tideway.native.conn import connect
from tideway.native.credentials import default_credentials
from tideway.protocol import errors
from tideway.protocol import messages as m
from tideway.protocol.messages import ApiKey


def _closed_within(sock: socket.socket, timeout_s: float) -> bool:
    sock.settimeout(timeout_s)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_connection_limits_refuse_log_and_count(broker_factory):
    metrics_port = free_port()
    broker = broker_factory(extra_args=[
        "--max-connections-per-principal", "2", "--max-unauthenticated-connections", "3",
        "--metrics-listen", f"127.0.0.1:{metrics_port}",
    ])

    async def per_principal() -> None:
        kept = [await connect("127.0.0.1", broker.port, credentials=default_credentials()) for _ in range(2)]
        try:
            with pytest.raises(errors.SaslAuthenticationFailedError, match="too many connections"):
                await connect("127.0.0.1", broker.port, credentials=default_credentials())
            assert (await kept[0].request(ApiKey.METADATA, m.MetadataRequest())).brokers  # the first two still work
        finally:
            for connection in kept:
                connection.close()

    asyncio.run(per_principal())

    waiting = [socket.create_connection(("127.0.0.1", broker.port)) for _ in range(3)]
    extra = socket.create_connection(("127.0.0.1", broker.port))
    assert _closed_within(extra, 5), "a 4th unauthenticated connection was kept"
    assert not _closed_within(waiting[0], 0.5)  # the first three wait for their authentication
    assert _closed_within(waiting[0], 15), "an unauthenticated connection outlived the authentication timeout"
    for sock in waiting + [extra]:
        sock.close()

    def scraped() -> str | None:
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()
        return metrics if 'reason="authentication_timeout"' in metrics else None

    metrics = wait_until(scraped, 5, "the authentication timeout counted in /metrics", interval_s=0.2)
    for reason in ("per_principal", "unauthenticated", "authentication_timeout"):
        assert f'tideway_connections_refused_total{{listener="client",reason="{reason}"}}' in metrics
    log = broker.log_text()
    assert "has 2 connections (limit)" in log and "not yet authenticated (limit)" in log and "no authentication within" in log
