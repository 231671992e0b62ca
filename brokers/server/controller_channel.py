"""A broker's link to the active controller.

The broker knows every controller's address (``--controller``). The channel
registers with whichever one is active (standbys answer NOT_CONTROLLER), then
heartbeats every ``heartbeat_interval_ms``; if the controller changes or
forgets us (STALE_BROKER_EPOCH) it registers again. Leaders send ISR changes
and brokers forward topic admin requests through it.

Ownership: event-loop thread; one task (``_run``) owns the connection choice.
"""

from __future__ import annotations

import asyncio
import logging

from tideway.aio import cancel_and_wait
from tideway.native.conn import Connection, connect
from tideway.protocol import errors
from tideway.protocol import messages as m
from tideway.protocol.messages import ApiKey

__all__ = ["ControllerChannel"]

log = logging.getLogger(__name__)


class ControllerChannel:
    def __init__(
        self,
        *,
        broker_id: int,
        controllers: list[tuple[str, int]],
        advertised: tuple[str, int],
        internal_advertised: tuple[str, int],
        credentials,
        kafka_advertised: tuple[str, int] | None = None,
        ssl_context=None,
        rack: str | None = None,
        heartbeat_interval_ms: int = 500,
    ) -> None:
        self.broker_id = broker_id
        self.controllers = controllers
        self.advertised = advertised
        self.internal_advertised = internal_advertised
        self.kafka_advertised = kafka_advertised  # None: this broker has no Kafka listener
        self.credentials = credentials  # ClusterPeer: the controller and this broker prove the cluster secret to each other
        self.ssl_context = ssl_context
        self.rack = rack
        self.heartbeat_interval_s = heartbeat_interval_ms / 1000
        self.broker_epoch = -1
        self._connection: Connection | None = None
        self._next_controller = 0
        self._task: asyncio.Task | None = None
        self.registered = asyncio.Event()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="controller-channel")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        if self._connection is not None:
            self._connection.close()

    async def _run(self) -> None:
        while True:
            try:
                if not self.registered.is_set():
                    await self._register()
                response = await self.request(ApiKey.BROKER_HEARTBEAT, m.BrokerHeartbeatRequest(broker_id=self.broker_id, broker_epoch=self.broker_epoch))
                del response
            except asyncio.CancelledError:
                raise
            except errors.StaleBrokerEpochError:
                log.info("the controller does not know this broker's session: registering again")
                self.registered.clear()
                continue
            except errors.SaslAuthenticationFailedError as exc:
                log.error("the controller refused this broker's cluster credentials (is TIDEWAY_CLUSTER_SECRET the same "
                          "everywhere?): %s", exc)
                self.registered.clear()
            except (errors.TidewayError, OSError) as exc:
                log.debug("controller unreachable: %s", exc)
                self.registered.clear()
            await asyncio.sleep(self.heartbeat_interval_s)

    async def _register(self) -> None:
        host, port = self.advertised
        internal_host, internal_port = self.internal_advertised
        kafka_host, kafka_port = self.kafka_advertised or ("", -1)
        response: m.BrokerRegisterResponse = await self.request(
            ApiKey.BROKER_REGISTER,
            m.BrokerRegisterRequest(broker_id=self.broker_id, host=host, port=port, rack=self.rack,
                                    internal_host=internal_host, internal_port=internal_port, kafka_host=kafka_host,
                                    kafka_port=kafka_port),
        )
        self.broker_epoch = response.broker_epoch
        self.registered.set()
        log.info("registered with the controller (controller epoch %d, broker epoch %d)", response.controller_epoch, response.broker_epoch)

    async def request(self, api: ApiKey, body, *, timeout_s: float = 10.0):
        """Send to the active controller, trying each address until one answers as active."""
        last_error: Exception | None = None
        for _ in range(len(self.controllers)):
            try:
                connection = await self._connect()
                return await connection.request(api, body, timeout_s=timeout_s)
            except (errors.NotControllerError, errors.ConnectionClosedError, errors.ClientTimeoutError) as exc:
                last_error = exc
                if self._connection is not None:
                    self._connection.close()
                    self._connection = None
                self._next_controller = (self._next_controller + 1) % len(self.controllers)
        raise errors.NotControllerError(f"no active controller among {len(self.controllers)} address(es): {last_error}")

    @property
    def current(self) -> int:
        """Index in ``controllers`` of the address in use (the active controller once registered)."""
        return self._next_controller

    async def _connect(self) -> Connection:
        if self._connection is None or self._connection.closed:
            host, port = self.controllers[self._next_controller]
            self._connection = await connect(host, port, timeout_s=2, credentials=self.credentials, ssl_context=self.ssl_context)
        return self._connection
