"""The controller process: campaigns for the lease, then runs the cluster.

While active it:

* answers brokers' registrations and heartbeats, and fences a broker whose
  session expired (moving its leaderships to other ISR members);
* decides ISR changes that leaders ask for (ALTER_ISR);
* takes a replica that found a corrupt batch out of its ISR, moving the
  leadership to a healthy in-sync replica when it led (REPLICA_DAMAGED);
* creates and deletes topics (brokers forward those admin requests here); a
  tenant's (a Kafka client's CreateTopics, say: the broker marks it with the
  tenant) goes to the control plane's queue actions (topics.tenant_admin),
  which apply the plan's quotas as the REST API does;
* runs preferred-leader elections so leadership returns after a recovery;
* pushes the whole cluster state to every live broker after each change, and
  every few seconds anyway, so a broker that missed one catches up.

While standby it answers NOT_CONTROLLER (naming the active one) and tries to
take the lease when it expires.

Every connection authenticates first (``brokers.server.authentication``):
brokers and other controllers with the cluster secret (TIDEWAY-CLUSTER, both
sides prove it), operators and the control plane with a service key (PLAIN);
tenant keys never. Broker RPCs (register, heartbeat, ALTER_ISR, key lookups)
answer cluster peers only; topic admin and DESCRIBE_CLUSTER peers and
services. Requests pass through the same ``Router`` as a broker's. Every database change runs on one thread
(``_db``) through clusters.controller.actions, which re-checks the lease in
the same transaction.

Ownership: heartbeat deadlines and connections belong to the event loop.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import ssl
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial

from tideway_server.brokers.server.authentication import Authenticator
from tideway_server.brokers.server.authorizer import Authorizer
from tideway_server.brokers.server.connection import BrokerConnection, Listener
from tideway_server.brokers.server.limits import ConnectionLimits, ConnectionRegistry
from tideway_server.brokers.server.router import Route, Router
from tideway_server.clusters.controller import actions
from tideway_server.clusters.controller.actions import Lease, LostLease
from tideway_server.topics import tenant_admin

from tideway.aio import cancel_and_wait
from tideway.native.conn import Connection, connect
from tideway.native.credentials import ClusterPeer
from tideway.protocol import errors
from tideway.protocol import messages as m
from tideway.protocol.errors import BrokerError
from tideway.protocol.handshake import CLUSTER_MECHANISM, PLAIN_MECHANISM
from tideway.protocol.messages import ApiKey

log = logging.getLogger(__name__)

HEARTBEAT_RECORD_INTERVAL_S = 5.0  # how often brokers' last-heartbeat times are written to the database


@dataclass
class ControllerConfig:
    cluster_secret: bytes = b""  # required: the deployment's (brokers/security/keys.py)
    cluster: str = "local"
    host: str = "127.0.0.1"
    port: int = 9400
    lease_ms: int = 3_000
    broker_session_timeout_ms: int = 3_000
    state_push_interval_ms: int = 5_000
    preferred_leader_check_ms: int = 5_000
    certfile: str | None = None  # TLS with this PEM certificate (chain) and key
    keyfile: str | None = None
    cafile: str | None = None  # CAs of the brokers' certificates, when their internal listeners use TLS
    limits: ConnectionLimits = ConnectionLimits(connections_max=2_000, unauthenticated_connections_max=200,
                                                frame_bytes_max=16 << 20)


class Controller:
    def __init__(self, config: ControllerConfig) -> None:
        self.config = config
        self.holder = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.lease: Lease | None = None
        self._db = ThreadPoolExecutor(max_workers=1, thread_name_prefix="controller-db")
        # Key lookups read on threads of their own: a burst of them never delays lease renewals.
        self._credential_db = ThreadPoolExecutor(max_workers=2, thread_name_prefix="controller-credentials")
        # A tenant's topic admin (topics.tenant_admin) runs the control plane's queue actions, which change the
        # cluster through the brokers and so through this controller: a thread of its own, never the db one.
        self._queue_admin = ThreadPoolExecutor(max_workers=2, thread_name_prefix="controller-queue-admin")
        self._cluster = None
        self._deadlines: dict[int, float] = {}  # broker id -> monotonic session deadline
        self._broker_epochs: dict[int, int] = {}
        self._connections: dict[int, Connection] = {}
        self._push_needed = asyncio.Event()
        # What the next push must carry: every topic (a broker joined, leaders moved) or only the
        # topics that changed. A change costs a push of what changed, not of the whole cluster:
        # creating a queue must not cost more with every queue there is.
        self._push_everything = False
        self._push_topics: set[str] = set()
        # One push in flight per broker, none waiting for another: a broker that froze holds only
        # its own push (up to its timeout), never the next push to the others (which, after a
        # fence, tells them they lead now). A broker skipped meanwhile gets everything next.
        self._pushing: dict[int, asyncio.Task] = {}
        self._skipped: set[int] = set()
        self._heartbeats_recorded = 0.0
        self._tasks: list[asyncio.Task] = []
        self._server: asyncio.AbstractServer | None = None
        self.port = config.port
        if not config.cluster_secret:
            raise ValueError("the controller needs the deployment's cluster secret")
        self.peer_credentials = ClusterPeer(config.cluster_secret, identity="controller")
        self.peer_tls = ssl.create_default_context(cafile=config.cafile) if config.certfile else None
        authenticator = Authenticator(
            cluster_secret=config.cluster_secret, credentials=None,
            mechanisms={Listener.INTERNAL: (CLUSTER_MECHANISM, PLAIN_MECHANISM)},
        )
        routes = {
            ApiKey.SASL_HANDSHAKE: Route(authenticator.handshake, takes_session=True),
            ApiKey.SASL_AUTHENTICATE: Route(authenticator.authenticate, takes_session=True),
            ApiKey.API_VERSIONS: Route(self._api_versions),
        }
        for api, handler in (
            (ApiKey.BROKER_REGISTER, self._register),
            (ApiKey.BROKER_HEARTBEAT, self._heartbeat),
            (ApiKey.ALTER_ISR, self._alter_isr),
            (ApiKey.REPLICA_DAMAGED, self._replica_damaged),
            (ApiKey.CREATE_TOPICS, self._create_topics),
            (ApiKey.DELETE_TOPICS, self._delete_topics),
            (ApiKey.CREATE_PARTITIONS, self._create_partitions),
            (ApiKey.ALTER_CONFIGS, self._alter_configs),
            (ApiKey.DESCRIBE_CLUSTER, self._describe_cluster),
            (ApiKey.DESCRIBE_CREDENTIAL, self._describe_credential),
        ):
            routes[api] = Route(self._while_active(handler, api))
        self.router = Router(routes, Authorizer(), name="the controller")
        self._registry = ConnectionRegistry(config.limits)

    async def db(self, function, *args, **kwargs):
        return await asyncio.get_running_loop().run_in_executor(self._db, partial(function, *args, **kwargs))

    # -- lifecycle --------------------------------------------------------------------

    async def start(self) -> None:
        self._cluster = await self.db(actions.get_or_create_cluster, self.config.cluster)
        loop = asyncio.get_running_loop()
        server_tls = None
        if self.config.certfile:
            server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            server_tls.load_cert_chain(self.config.certfile, self.config.keyfile)
        self._server = await loop.create_server(
            lambda: BrokerConnection(self.router.dispatch, listener=Listener.INTERNAL, registry=self._registry,
                                     on_close=lambda c: None),
            self.config.host,
            self.config.port,
            reuse_address=True,
            ssl=server_tls,
        )
        self.port = self._server.sockets[0].getsockname()[1]
        self._tasks = [loop.create_task(self._campaign()), loop.create_task(self._pusher())]
        log.info("controller %s listening on %s:%d for cluster %r", self.holder, self.config.host, self.port, self.config.cluster)

    async def stop(self) -> None:
        await cancel_and_wait(*self._tasks, *self._pushing.values())
        if self._server is not None:
            self._server.close()
        if self.lease is not None:
            try:
                await self.db(actions.release_lease, self.lease)
            except Exception:
                log.exception("could not release the lease")
        for connection in self._connections.values():
            connection.close()
        self._db.shutdown(wait=True)
        self._credential_db.shutdown(wait=True)
        self._queue_admin.shutdown(wait=True)

    @property
    def active(self) -> bool:
        return self.lease is not None

    # -- the lease ----------------------------------------------------------------------

    async def _campaign(self) -> None:
        address = f"{self.config.host}:{self.port}"
        ttl_s = self.config.lease_ms / 1000
        while True:
            try:
                if self.lease is None:
                    lease = await self.db(actions.try_acquire_lease, self._cluster, holder=self.holder, address=address, ttl_s=ttl_s)
                    if lease is not None:
                        await self._become_active(lease)
                else:
                    await self.db(actions.renew_lease, self.lease)
                    await self._expire_sessions()
                    await self._record_heartbeats()
                    await self._maybe_elect_preferred_leaders()
            except LostLease as exc:
                self._resign(str(exc))
            except Exception:
                # A database hiccup (e.g. SQLite busy): the lease guard keeps us
                # safe, so log and try again next round.
                log.exception("controller round failed")
            await asyncio.sleep(min(ttl_s / 3, 0.25))

    async def _become_active(self, lease: Lease) -> None:
        self.lease = lease
        # Every broker known alive gets one session timeout to reach us.
        deadline = time.monotonic() + self.config.broker_session_timeout_ms / 1000
        self._deadlines = {b: deadline for b in await self.db(actions.alive_broker_ids, lease)}
        self._last_preferred_check = time.monotonic()
        log.info("controller %s is active in epoch %d", self.holder, lease.epoch)
        self._push_soon()

    def _resign(self, reason: str) -> None:
        log.warning("controller %s stepping down: %s", self.holder, reason)
        self.lease = None
        self._deadlines.clear()

    async def _expire_sessions(self) -> None:
        now = time.monotonic()
        for broker_id, deadline in list(self._deadlines.items()):
            if deadline < now:
                del self._deadlines[broker_id]
                moved = await self.db(actions.do_fence_broker, self.lease, broker_id)
                log.warning("broker %d session expired: fenced; leadership moved: %s", broker_id, ", ".join(moved) or "none")
                self._push_soon()

    async def _record_heartbeats(self) -> None:
        now = time.monotonic()
        if now - self._heartbeats_recorded < HEARTBEAT_RECORD_INTERVAL_S or not self._deadlines:
            return
        self._heartbeats_recorded = now
        await self.db(actions.record_heartbeats, self.lease, list(self._deadlines))

    async def _maybe_elect_preferred_leaders(self) -> None:
        if time.monotonic() - self._last_preferred_check < self.config.preferred_leader_check_ms / 1000:
            return
        self._last_preferred_check = time.monotonic()
        moved = await self.db(actions.do_preferred_leader_election, self.lease)
        if moved:
            log.info("preferred leader election: %s", ", ".join(moved))
            self._push_soon()

    # -- pushing state to brokers -------------------------------------------------------------

    async def _pusher(self) -> None:
        interval_s = self.config.state_push_interval_ms / 1000
        while True:
            try:
                await asyncio.wait_for(self._push_needed.wait(), interval_s)
                periodic = False
            except TimeoutError:
                periodic = True
            self._push_needed.clear()
            # The periodic push carries everything: a broker that missed a push (it was down, or
            # the push failed) catches up within an interval.
            everything = periodic or self._push_everything or not self._push_topics
            topics, self._push_topics, self._push_everything = self._push_topics, set(), False
            if self.lease is None:
                continue
            try:
                state = await self.db(actions.snapshot, self.lease, topics=None if everything else sorted(topics))
            except Exception:
                log.exception("could not read cluster state")
                continue
            alive = set(self._deadlines)
            whole = state if everything else None
            for broker in state.brokers:
                if broker.node_id not in alive:
                    continue
                if broker.node_id in self._pushing:
                    self._skipped.add(broker.node_id)
                    continue
                sent = state
                if broker.node_id in self._skipped:
                    if whole is None:
                        try:
                            whole = await self.db(actions.snapshot, self.lease, topics=None)
                        except Exception:
                            log.exception("could not read cluster state")
                            continue
                    sent = whole
                    self._skipped.discard(broker.node_id)
                task = asyncio.get_running_loop().create_task(self._push_to(broker, sent))
                self._pushing[broker.node_id] = task
                task.add_done_callback(lambda _done, node_id=broker.node_id: self._pushed(node_id))

    def _pushed(self, node_id: int) -> None:
        self._pushing.pop(node_id, None)
        if node_id in self._skipped:
            self._push_needed.set()  # what it missed goes now

    def _push_soon(self, topics: list[str] | None = None) -> None:
        """Have the pusher push ``topics`` (None: everything) now."""
        if topics is None:
            self._push_everything = True
        else:
            self._push_topics.update(topics)
        self._push_needed.set()

    async def _push_to(self, broker: m.BrokerInfo, state: m.ClusterStateRequest) -> None:
        try:
            address = next(((a.host, a.port) for a in state.internal_listeners if a.node_id == broker.node_id), None)
            if address is None:
                return  # registered before it had an internal listener: it registers again
            connection = self._connections.get(broker.node_id)
            if connection is None or connection.closed or (connection.host, connection.port) != address:
                connection = await connect(*address, timeout_s=2, credentials=self.peer_credentials,
                                           ssl_context=self.peer_tls)
                self._connections[broker.node_id] = connection
            await connection.request(ApiKey.CLUSTER_STATE, state, timeout_s=5)
        except errors.StaleControllerEpochError:
            self._resign(f"broker {broker.node_id} has seen a newer controller")
        except errors.SaslAuthenticationFailedError as exc:
            log.error("broker %d refused the controller's cluster credentials: %s", broker.node_id, exc)
        except (errors.TidewayError, OSError) as exc:
            log.debug("push to broker %d failed: %s", broker.node_id, exc)
            # A push that got no answer leaves its bytes in the connection's send queue: after a network
            # partition heals, TCP retransmits them only after its backoff (tens of seconds after a long cut),
            # and every later push waits behind them. A new connection carries the next push at once.
            stale = self._connections.pop(broker.node_id, None)
            if stale is not None:
                stale.close()

    # -- requests --------------------------------------------------------------------------------

    def _while_active(self, handler, api: ApiKey):
        """``handler`` when this controller holds the lease; NOT_CONTROLLER (naming the active one) otherwise."""

        async def guarded(request):
            if self.lease is None:
                active = await self.db(actions.current_lease, self._cluster)
                where = f" (active: {active.address}, epoch {active.epoch})" if active is not None and active.holder else ""
                raise errors.NotControllerError(f"this controller is on standby{where}")
            try:
                return await handler(request)
            except LostLease as exc:
                self._resign(str(exc))
                raise errors.NotControllerError("this controller just lost its lease") from None

        guarded.__name__ = f"{api.name.lower()}_while_active"
        return guarded

    async def _api_versions(self, request: m.ApiVersionsRequest) -> m.ApiVersionsResponse:
        served = set(self.router.routes)
        return m.ApiVersionsResponse(
            apis=[m.ApiVersion(api_key=int(k), min_version=lo, max_version=hi) for k, (lo, hi) in m.API_VERSIONS.items() if k in served]
        )

    async def _register(self, request: m.BrokerRegisterRequest) -> m.BrokerRegisterResponse:
        broker_epoch = await self.db(
            actions.do_register_broker, self.lease, broker_id=request.broker_id, host=request.host, port=request.port,
            rack=request.rack, internal_host=request.internal_host, internal_port=request.internal_port,
            kafka_host=request.kafka_host, kafka_port=request.kafka_port,
        )
        self._broker_epochs[request.broker_id] = broker_epoch
        self._deadlines[request.broker_id] = time.monotonic() + self.config.broker_session_timeout_ms / 1000
        log.info("broker %d registered from %s:%d (broker epoch %d)", request.broker_id, request.host, request.port, broker_epoch)
        self._push_soon()
        return m.BrokerRegisterResponse(broker_epoch=broker_epoch, controller_epoch=self.lease.epoch)

    async def _heartbeat(self, request: m.BrokerHeartbeatRequest) -> m.BrokerHeartbeatResponse:
        if self._broker_epochs.get(request.broker_id) != request.broker_epoch or request.broker_id not in self._deadlines:
            # Unknown to this controller (it just took over) or fenced: register again.
            raise errors.StaleBrokerEpochError(f"broker {request.broker_id} must register with this controller")
        self._deadlines[request.broker_id] = time.monotonic() + self.config.broker_session_timeout_ms / 1000
        return m.BrokerHeartbeatResponse(controller_epoch=self.lease.epoch)

    async def _alter_isr(self, request: m.AlterIsrRequest) -> m.AlterIsrResponse:
        state = await self.db(actions.do_alter_isr, self.lease, request)
        self._push_soon([request.topic])
        return m.AlterIsrResponse(state=state)

    async def _replica_damaged(self, request: m.ReplicaDamagedRequest) -> m.ReplicaDamagedResponse:
        if self._broker_epochs.get(request.broker_id) != request.broker_epoch:
            raise errors.StaleBrokerEpochError(f"broker {request.broker_id} must register with this controller")
        state = await self.db(actions.do_replica_damaged, self.lease, request)
        self._push_soon([request.topic])
        return m.ReplicaDamagedResponse(state=state)

    async def _tenant_admin(self, function, *args):
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._queue_admin, partial(function, *args))

    async def _create_topics(self, request: m.CreateTopicsRequest) -> m.CreateTopicsResponse:
        if request.tenant_id is not None:
            return await self._tenant_admin(tenant_admin.create_queues, request.tenant_id, request.acting,
                                            self._cluster, request)
        results = []
        for topic in request.topics:
            result = m.TopicResult(name=topic.name)
            try:
                if not request.validate_only:
                    await self.db(actions.do_create_topic, self.lease, topic)
            except BrokerError as exc:
                result.error_code, result.error_message = exc.errno, exc.message
            results.append(result)
        await self._wait_for_push([topic.name for topic in request.topics])
        return m.CreateTopicsResponse(topics=results)

    async def _delete_topics(self, request: m.DeleteTopicsRequest) -> m.DeleteTopicsResponse:
        if request.tenant_id is not None:
            return await self._tenant_admin(tenant_admin.delete_queues, request.tenant_id, request.acting, request)
        results = []
        deleted = []
        for name in request.names:
            result = m.TopicResult(name=name)
            try:
                await self.db(actions.do_delete_topic, self.lease, name)
                deleted.append(name)
            except BrokerError as exc:
                result.error_code, result.error_message = exc.errno, exc.message
            results.append(result)
        if deleted:
            state = await self.db(actions.snapshot, self.lease, topics=[])
            state.deleted_topics = deleted
            alive = set(self._deadlines)
            await asyncio.gather(*(self._push_to(b, state) for b in state.brokers if b.node_id in alive))
        return m.DeleteTopicsResponse(topics=results)

    async def _create_partitions(self, request: m.CreatePartitionsRequest) -> m.CreatePartitionsResponse:
        if request.tenant_id is not None:
            return await self._tenant_admin(tenant_admin.grow_queue, request.tenant_id, request.acting, request)
        if request.validate_only:
            return m.CreatePartitionsResponse()
        await self.db(actions.do_create_partitions, self.lease, request.topic, request.count)
        await self._wait_for_push([request.topic])
        return m.CreatePartitionsResponse()

    async def _alter_configs(self, request: m.AlterConfigsRequest) -> m.AlterConfigsResponse:
        configs = await self.db(actions.do_alter_configs, self.lease, request.topic, request.set, request.delete)
        await self._wait_for_push([request.topic])
        return m.AlterConfigsResponse(configs=configs)

    async def _wait_for_push(self, topics: list[str]) -> None:
        """Push ``topics`` now, so an admin call returns once the brokers know the result."""
        state = await self.db(actions.snapshot, self.lease, topics=topics)
        alive = set(self._deadlines)
        await asyncio.gather(*(self._push_to(b, state) for b in state.brokers if b.node_id in alive))

    async def _describe_cluster(self, request: m.DescribeClusterRequest) -> m.DescribeClusterResponse:
        return await self.db(actions.describe, self.lease)

    async def _describe_credential(self, request: m.DescribeCredentialRequest) -> m.DescribeCredentialResponse:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._credential_db, actions.describe_credential, request.prefix)
