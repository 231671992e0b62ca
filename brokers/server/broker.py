"""The broker: request handlers over a LogManager, and the process lifecycle.

A broker has two listeners: the *client* listener (tenants' native clients,
the gateway, the CLI; PLAIN with an API key or service key) and the
*internal* listener (replica fetches, the controller's CLUSTER_STATE, queue
coordinators reading other brokers; cluster peers proving they hold the
cluster secret). Every request goes through one ``Router``: version check,
``Authorizer``, handler.

The broker wires its parts and owns the process lifecycle, topic admin and
the controller's instructions (roles, fetchers, ISR changes); the
``MetadataCache`` holds what it knows of the cluster, the ``ReplicaManager``
its replicas and the requests that read and write them, and the group
coordinator gets those two (and a way to reach peers) instead of the broker.

Ownership: everything here runs on the event-loop thread, except the fsync
calls handed to worker threads (``Log.flush``), which only touch file
descriptors and publish a durable offset.

Why one file of ~650 lines: the broker's lifecycle and every request it answers itself (topic admin and
the controller's instructions) in one place; the data path lives in replica_manager.py, groups and queues in
their own packages.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import ssl
import struct
from dataclasses import dataclass

from tideway_server.brokers.groups.coordinator import GroupCoordinator
from tideway_server.brokers.kafka.apis import KafkaApis
from tideway_server.brokers.kafka.router import KafkaRouter
from tideway_server.brokers.replication import Partition, ReplicaFetcher, Role
from tideway_server.brokers.server.authentication import Authenticator
from tideway_server.brokers.server.authorizer import Authorizer
from tideway_server.brokers.server.connection import BrokerConnection, Listener, Session
from tideway_server.brokers.server.controller_channel import ControllerChannel
from tideway_server.brokers.server.credentials import CredentialStore
from tideway_server.brokers.server.limits import (
    ConnectionLimits,
    ConnectionRegistry,
    RequestBuffers,
)
from tideway_server.brokers.server.metadata_cache import MetadataCache, unknown_topic
from tideway_server.brokers.server.metrics import BrokerMetrics, serve_metrics
from tideway_server.brokers.server.repair import ReplicaRepair
from tideway_server.brokers.server.replica_manager import ReplicaManager
from tideway_server.brokers.server.router import Route, Router
from tideway_server.brokers.server.usage import UsageMeter
from tideway_server.brokers.storage import LogManager, TopicConfig, cleaner
from tideway_server.brokers.storage.config import altered_settings
from tideway_server.brokers.storage.scrubber import Scrubber
from tideway_server.brokers.transactions.coordinator import TransactionCoordinator

from tideway.aio import cancel_and_wait
from tideway.native.credentials import ClusterPeer
from tideway.protocol import errors
from tideway.protocol import messages as m
from tideway.protocol.errors import BrokerError, InvalidRequestError
from tideway.protocol.handshake import CLUSTER_MECHANISM, PLAIN_MECHANISM
from tideway.protocol.messages import ApiKey

__all__ = ["Broker", "BrokerConfig"]

log = logging.getLogger(__name__)

_RECORD_COUNT = struct.Struct(">i")
FETCH_WAIT_MS_MAX = 30_000
MAX_TRAFFIC_TOPICS = 10_000  # topics one DESCRIBE_TRAFFIC may name


@dataclass
class BrokerConfig:
    broker_id: int
    data_dir: str
    cluster_secret: bytes  # the deployment's (brokers/security/keys.py): peers prove it, service keys derive from it
    host: str = "127.0.0.1"
    port: int = 9401
    advertised_host: str | None = None
    advertised_port: int | None = None
    internal_host: str = "127.0.0.1"  # the internal listener: replication, controller, coordinators
    internal_port: int = 9501
    internal_advertised_host: str | None = None
    internal_advertised_port: int | None = None
    kafka_host: str | None = None  # the Kafka listener (brokers/kafka/) on this host; None: none
    kafka_port: int = 9092
    kafka_advertised_host: str | None = None
    kafka_advertised_port: int | None = None
    metrics_host: str | None = None  # None: no metrics endpoint (it belongs on the internal address)
    metrics_port: int = 0
    certfile: str | None = None  # TLS on both listeners with this PEM certificate (chain) ...
    keyfile: str | None = None  # ... and its key
    cafile: str | None = None  # CAs that sign peers' certificates, when the internal listeners use TLS
    client_limits: ConnectionLimits = ConnectionLimits()
    internal_limits: ConnectionLimits = ConnectionLimits(connections_max=1_000, unauthenticated_connections_max=100)
    checkpoint_interval_ms: int = 5_000
    retention_check_interval_ms: int = 300_000
    flush_check_interval_ms: int = 50
    replica_fetch_wait_ms: int = 500
    controllers: list[tuple[str, int]] | None = None  # None: standalone
    rack: str | None = None
    replica_lag_time_max_ms: int = 10_000
    isr_check_interval_ms: int = 500
    log_cleaner_interval_ms: int = 15_000
    offsets_topic_partitions: int = 8  # partitions of __consumer_offsets when a broker creates it
    group_heartbeat_interval_ms: int = 1_000
    open_segments_max: int = 1_000  # segment files kept open (the least recently used are closed)
    queue_idle_unload_ms: int = 300_000  # a queue group's share-partition idle this long leaves memory
    transactional_id_expiration_ms: int = 7 * 24 * 3600 * 1000  # an id with no transaction this long is forgotten
    scrub_bytes_per_s: int = 8 << 20  # the scrubber re-reads and CRC-checks logs at this rate; 0: never
    scrub_interval_ms: int = 25  # short, frequent steps: see brokers/storage/scrubber.py
    scrub_pass_interval_s: float = 3600  # a pass over every log starts at most this often
    usage_interval_ms: int = 1_000  # how often usage goes to __usage (metering); 0: off
    usage_storage_interval_s: float = 60.0  # how often storage is sampled for it
    request_buffer_bytes_max: int = 256 << 20  # requests in progress held at once (limits.RequestBuffers) ...
    request_buffer_per_principal_bytes_max: int = 64 << 20  # ... and for one principal
    credentials_outage_max_s: float = 600.0  # tenant keys checked this recently still count while the controller is away




class Broker:
    """A broker: serves produce, fetch, offsets, metadata and topic admin.

    Standalone (no controller has ever spoken to its data directory) it leads
    every partition it has alone. Once a controller has pushed cluster state
    (``CLUSTER_STATE``) it is in cluster mode for good: roles, replicas and the
    metadata it serves all come from the controller, fenced by controller epoch.
    """

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.logs = LogManager(config.data_dir, open_segments_max=config.open_segments_max)
        self.metrics = BrokerMetrics(lambda: self.logs)
        self._servers: list[asyncio.AbstractServer] = []
        self._connections: set[BrokerConnection] = set()
        self._background: list[asyncio.Task] = []
        self._checkpoint_write: asyncio.Future | None = None  # the periodic checkpoint written in a worker thread
        self._stopped = asyncio.Event()
        self.port = config.port
        self.internal_port = config.internal_port
        self.kafka_port = config.kafka_port
        self.metadata = MetadataCache(config.broker_id, self.logs, advertised=self.advertised,
                                      internal_advertised=self.internal_advertised,
                                      kafka_advertised=self.kafka_advertised)
        self.replicas = ReplicaManager(config.broker_id, self.logs, self.metadata, self.metrics,
                                       on_data=lambda topic: self.coordinator.queues.on_data(topic))
        self.peer_credentials = ClusterPeer(config.cluster_secret, identity=f"broker-{config.broker_id}")
        self.peer_tls = ssl.create_default_context(cafile=config.cafile) if config.certfile else None
        self._fetchers: dict[int, ReplicaFetcher] = {}
        self.repair = ReplicaRepair(config.broker_id, self.replicas.partitions, self.metrics,
                                    self._report_damage if config.controllers else None)
        self.logs.on_corruption = self.repair.on_corruption
        self.scrubber = Scrubber(lambda: self.logs.logs,
                                 bytes_per_step=config.scrub_bytes_per_s * config.scrub_interval_ms // 1000,
                                 pass_interval_s=config.scrub_pass_interval_s)
        self.controller_channel: ControllerChannel | None = None
        self._isr_requests_in_flight: set[tuple[str, int]] = set()
        self._compacted_through: dict[tuple[str, int], int] = {}  # active segment base at the last compaction
        self.coordinator = GroupCoordinator(
            broker_id=config.broker_id,
            replicas=self.replicas,
            metadata=self.metadata,
            create_topics=self._create_topics,
            peer_client=self._peer_client,
            internal_partitions=config.offsets_topic_partitions,
            heartbeat_interval_ms=config.group_heartbeat_interval_ms,
            queue_idle_unload_ms=config.queue_idle_unload_ms,
        )
        self.replicas.on_marker = self.coordinator.on_txn_marker
        self.transactions = TransactionCoordinator(
            broker_id=config.broker_id, replicas=self.replicas, metadata=self.metadata,
            create_topics=self._create_topics, peer_client=self._peer_client,
            partitions=config.offsets_topic_partitions, idle_id_expiry_ms=config.transactional_id_expiration_ms)
        self.transactions.offsets_topic = self.coordinator.state
        self.replicas.verify_transaction = self.transactions.verify
        self.transactions.write_local_markers = self.replicas.write_txn_markers
        self.usage = None
        if config.usage_interval_ms > 0:
            self.usage = UsageMeter(config.broker_id, self.replicas, self.metrics.traffic, self._create_topics,
                                    self._peer_client, self._usage_replication, interval_ms=config.usage_interval_ms,
                                    storage_interval_s=config.usage_storage_interval_s)
        self.credentials = CredentialStore(self._describe_credential if config.controllers else None,
                                           outage_stale_max_s=config.credentials_outage_max_s)
        self.authenticator = Authenticator(
            cluster_secret=config.cluster_secret,
            credentials=self.credentials,
            mechanisms={Listener.CLIENT: (PLAIN_MECHANISM,), Listener.INTERNAL: (CLUSTER_MECHANISM,),
                        Listener.KAFKA: (PLAIN_MECHANISM,)},
            on_failure=lambda mechanism: self.metrics.authentication_failures.labels(mechanism[:32]).inc(),
        )
        coordinator, queues = self.coordinator, self.coordinator.queues
        routes = {
            ApiKey.API_VERSIONS: Route(self._api_versions),
            ApiKey.SASL_HANDSHAKE: Route(self.authenticator.handshake, takes_session=True),
            ApiKey.SASL_AUTHENTICATE: Route(self.authenticator.authenticate, takes_session=True),
            ApiKey.PRODUCE: Route(self.replicas.produce),
            ApiKey.FETCH: Route(self.replicas.fetch, answers_more=True),
            ApiKey.LIST_OFFSETS: Route(self.replicas.list_offsets),
            ApiKey.DELETE_RECORDS: Route(self.replicas.delete_records),
            ApiKey.WRITE_TXN_MARKERS: Route(self.replicas.write_txn_markers),
            ApiKey.OFFSET_FOR_LEADER_EPOCH: Route(self.replicas.offset_for_leader_epoch),
            ApiKey.METADATA: Route(self._metadata, takes_session=True),
            ApiKey.CREATE_TOPICS: Route(self._create_topics),
            ApiKey.DELETE_TOPICS: Route(self._delete_topics),
            ApiKey.DESCRIBE_TOPICS: Route(self._describe_topics),
            ApiKey.CLUSTER_STATE: Route(self._cluster_state),
            ApiKey.CREATE_PARTITIONS: Route(self._create_partitions),
            ApiKey.ALTER_CONFIGS: Route(self._alter_configs),
            ApiKey.FIND_COORDINATOR: Route(self._find_coordinator, takes_session=True),
            ApiKey.INIT_PRODUCER_ID: Route(self.transactions.init_producer_id),
            ApiKey.ADD_PARTITIONS_TO_TXN: Route(self.transactions.add_partitions),
            ApiKey.END_TXN: Route(self.transactions.end_txn),
            ApiKey.ADD_OFFSETS_TO_TXN: Route(self.transactions.add_offsets),
            ApiKey.TXN_OFFSET_COMMIT: Route(coordinator.txn_offset_commit),
            ApiKey.DESCRIBE_TRANSACTIONS: Route(self._describe_transactions),
            ApiKey.LIST_TRANSACTIONS: Route(self._list_transactions),
            ApiKey.OFFSET_COMMIT: Route(coordinator.offset_commit),
            ApiKey.OFFSET_FETCH: Route(coordinator.offset_fetch),
            ApiKey.OFFSET_DELETE: Route(coordinator.offset_delete),
            ApiKey.CONSUMER_GROUP_HEARTBEAT: Route(coordinator.heartbeat),
            ApiKey.DESCRIBE_GROUP: Route(coordinator.describe),
            ApiKey.LIST_GROUPS: Route(coordinator.list_groups),
            ApiKey.DESCRIBE_TRAFFIC: Route(self._describe_traffic),
            ApiKey.SHARE_ACQUIRE: Route(queues.acquire),
            ApiKey.SHARE_ACKNOWLEDGE: Route(queues.acknowledge),
        }
        authorizer = Authorizer(
            self.credentials, on_refused=lambda api, exc: self.metrics.requests_refused.labels(api.name, exc.name).inc(),
            on_tenant_request=self.metrics.traffic.add_request,
        )
        self.router = Router(routes, authorizer, name=f"broker {config.broker_id}",
                             observe=self.metrics.observe_request)
        self.kafka_apis = KafkaApis(self.router, self.authenticator, broker_id=config.broker_id,
                                    kafka_address=lambda node: self.metadata.address_of(node, Listener.KAFKA))
        self.kafka_router = KafkaRouter(self.kafka_apis)
        self.coordinator.classic_members = self.kafka_apis.groups.member_descriptions
        # One budget for both listeners: what callers' requests in progress may hold (limits.RequestBuffers).
        self.request_buffers = RequestBuffers(config.request_buffer_bytes_max, config.request_buffer_per_principal_bytes_max)
        self._registries = {
            listener: ConnectionRegistry(
                limits, on_refused=lambda reason, listener=listener: self.metrics.connections_refused.labels(listener.value, reason).inc()
            )
            for listener, limits in ((Listener.CLIENT, config.client_limits), (Listener.INTERNAL, config.internal_limits),
                                     (Listener.KAFKA, config.client_limits))
        }

    # -- lifecycle --------------------------------------------------------------------

    async def start(self) -> None:
        self.logs.open()
        self.metadata.load()
        if self.config.controllers:
            self.metadata.cluster_mode = True
        for log_ in self.logs.logs.values():
            partition = self.replicas.add_partition(log_)
            if not self.metadata.cluster_mode:
                partition.make_standalone_leader()
        for log_ in self.logs.logs.values():
            if log_.corruption_found is not None:
                self.repair.on_corruption(log_, *log_.corruption_found)
        loop = asyncio.get_running_loop()
        server_tls = None
        if self.config.certfile:
            server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            server_tls.load_cert_chain(self.config.certfile, self.config.keyfile)
        # Internal first: once the client port answers, the broker is wholly up.
        internal_server = await loop.create_server(
            lambda: self._new_connection(Listener.INTERNAL), self.config.internal_host, self.config.internal_port,
            reuse_address=True, backlog=256, ssl=server_tls,
        )
        client_server = await loop.create_server(
            lambda: self._new_connection(Listener.CLIENT), self.config.host, self.config.port,
            reuse_address=True, backlog=1024, ssl=server_tls,
        )
        self._servers = [client_server, internal_server]
        self.port = client_server.sockets[0].getsockname()[1]
        self.internal_port = internal_server.sockets[0].getsockname()[1]
        if self.config.kafka_host is not None:
            kafka_server = await loop.create_server(
                lambda: self._new_connection(Listener.KAFKA), self.config.kafka_host, self.config.kafka_port,
                reuse_address=True, backlog=1024, ssl=server_tls,
            )
            self._servers.append(kafka_server)
            self.kafka_port = kafka_server.sockets[0].getsockname()[1]
            log.info("Kafka listener on %s:%d", self.config.kafka_host, self.kafka_port)
        if self.config.metrics_host is not None:
            server = serve_metrics(self.metrics, self.config.metrics_host, self.config.metrics_port, self.config.cluster_secret)
            self.metrics_port = server.server_port
            self._metrics_server = server
            log.info("metrics on http://%s:%d/metrics", self.config.metrics_host, self.metrics_port)
        if self.config.controllers:
            self.controller_channel = ControllerChannel(
                broker_id=self.config.broker_id,
                controllers=self.config.controllers,
                advertised=self.advertised(),
                internal_advertised=self.internal_advertised(),
                kafka_advertised=self.kafka_advertised(),
                rack=self.config.rack,
                credentials=self.peer_credentials,
                ssl_context=self.peer_tls,
            )
            self.controller_channel.start()
        self._background = [
            loop.create_task(self._every(self.config.isr_check_interval_ms, self._maintain_isr)),
            loop.create_task(self._every(self.config.flush_check_interval_ms, self.replicas.flush_due)),
            loop.create_task(self._every(self.config.checkpoint_interval_ms, self._checkpoint)),
            loop.create_task(self._every(1000, self._roll_traffic)),
            loop.create_task(self._every(1000, self.kafka_apis.expire_sessions)),
            loop.create_task(self._every(self.config.retention_check_interval_ms, self._enforce_retention)),
            loop.create_task(self._every(self.config.log_cleaner_interval_ms, self._compact_logs)),
        ]
        if self.config.scrub_bytes_per_s > 0:
            self._background.append(loop.create_task(self._every(self.config.scrub_interval_ms, self._scrub)))
        if self.usage is not None:
            self._background.append(loop.create_task(self.usage.run()))
        self.coordinator.start()
        self.transactions.start()
        if not self.metadata.cluster_mode:
            self.coordinator.on_roles_changed()
            self.transactions.on_roles_changed()
        # Objects alive after start-up (modules, indexes, config) live as long
        # as the process: move them out of the collector's sight so full
        # collections stay short and do not show up in request latency.
        gc.freeze()
        log.info(
            "broker %d listening on %s:%d (clients) and %s:%d (internal)%s, data in %s",
            self.config.broker_id,
            self.config.host,
            self.port,
            self.config.internal_host,
            self.internal_port,
            " with TLS" if server_tls else "",
            self.logs.data_dir,
        )

    async def stop(self) -> None:
        """Stop serving, then flush and checkpoint every log (a clean shutdown)."""
        if self.usage is not None:  # the last interval's usage, while the listeners still answer
            try:
                await asyncio.wait_for(self.usage.flush(), 2)
            except Exception as exc:  # noqa: BLE001 - a shutdown goes on; at most one interval's egress is lost
                log.info("usage: last flush failed: %s", exc)
        for server in self._servers:
            server.close()
        for connection in list(self._connections):
            connection.close()
        await cancel_and_wait(*self._background)
        if self.usage is not None:
            await self.usage.stop()
        await self.coordinator.stop()
        await self.transactions.stop()
        for fetcher in list(self._fetchers.values()):
            await fetcher.stop()
        if self.controller_channel is not None:
            await self.controller_channel.stop()
        await self.replicas.stop()
        if self._checkpoint_write is not None:
            await asyncio.gather(self._checkpoint_write, return_exceptions=True)
        self.logs.close()
        if getattr(self, "_metrics_server", None) is not None:
            self._metrics_server.shutdown()
        log.info("broker %d stopped cleanly", self.config.broker_id)
        self._stopped.set()

    async def serve_forever(self) -> None:
        """Run until SIGTERM or SIGINT, then stop cleanly."""
        await self.start()
        loop = asyncio.get_running_loop()
        stop_requested = asyncio.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop_requested.set)
        await stop_requested.wait()
        log.info("shutting down on signal")
        await self.stop()

    def _new_connection(self, listener: Listener) -> BrokerConnection:
        kafka = listener is Listener.KAFKA  # Kafka's frames, answered in order (brokers/kafka/)
        connection = BrokerConnection(
            self.kafka_router.dispatch if kafka else self.router.dispatch, listener=listener,
            registry=self._registries[listener], on_close=self._connections.discard, buffers=self.request_buffers,
            ordered=kafka,
        )
        self._connections.add(connection)
        return connection

    async def _every(self, interval_ms: int, action) -> None:
        """Run ``action`` every ``interval_ms``, or after the seconds it returns when longer.

        An action with nothing due for a while (the scrubber between passes, fsyncs when no topic has a
        flush interval) says so: an idle broker is not woken 60 times a second for nothing.
        """
        wait_s = interval_ms / 1000
        while True:
            await asyncio.sleep(wait_s)
            wait_s = interval_ms / 1000
            try:
                later = await action()
            except Exception:
                log.exception("background task %s failed", action.__name__)
            else:
                if later is not None:
                    wait_s = max(wait_s, later)

    async def _maintain_isr(self) -> None:
        """Leaders ask the controller to drop lagging followers and re-admit caught-up ones."""
        if self.controller_channel is None:
            return
        lag_s = self.config.replica_lag_time_max_ms / 1000
        for key, partition in list(self.replicas.partitions.items()):
            if partition.role is not Role.LEADER or len(partition.replicas) < 2 or key in self._isr_requests_in_flight:
                continue
            lagging = set(partition.lagging_replicas(lag_s))
            joining = partition.caught_up_outside_isr(lag_s)
            if not lagging and not joining:
                continue
            new_isr = [r for r in partition.replicas if (r in partition.isr and r not in lagging) or r in joining]
            self._isr_requests_in_flight.add(key)
            asyncio.get_running_loop().create_task(self._request_isr_change(partition, new_isr, lagging, joining))

    async def _request_isr_change(self, partition: Partition, new_isr: list[int], lagging: set[int], joining: list[int]) -> None:
        key = (partition.topic, partition.partition)
        try:
            log.info("%s-%d: asking the controller for ISR %s (lagging %s, caught up %s)", *key, new_isr, sorted(lagging), joining)
            request = m.AlterIsrRequest(
                broker_id=self.config.broker_id,
                topic=partition.topic,
                partition=partition.partition,
                leader_epoch=partition.leader_epoch,
                partition_epoch=partition.partition_epoch,
                new_isr=new_isr,
            )
            response: m.AlterIsrResponse = await self.controller_channel.request(ApiKey.ALTER_ISR, request)
            state = response.state
            if state is not None and partition.role is Role.LEADER and state.leader_epoch == partition.leader_epoch:
                partition.update_isr(state.isr, state.partition_epoch)
        except errors.TidewayError as exc:
            log.info("%s-%d: ISR change refused or failed: %s", *key, exc)
        finally:
            self._isr_requests_in_flight.discard(key)

    async def _checkpoint(self) -> None:
        # The fsyncs go to a worker thread: on a busy disk one can wait for the journal to write
        # back other files' data, and on this thread that stalled every request (100-250 ms
        # publish latencies after a heavy write burst).
        # stop() waits for a write in flight before the final checkpoint (same files).
        self._checkpoint_write = asyncio.get_running_loop().run_in_executor(
            None, self.logs.write_checkpoint, self.logs.checkpoint_contents()
        )
        await asyncio.shield(self._checkpoint_write)

    async def _scrub(self) -> float:
        self.metrics.scrubbed_bytes.inc(self.scrubber.step())
        return self.scrubber.idle_for()

    async def _roll_traffic(self) -> None:
        self.metrics.traffic.roll()

    async def _describe_traffic(self, request: m.DescribeTrafficRequest) -> m.DescribeTrafficResponse:
        if len(request.topics) > MAX_TRAFFIC_TOPICS:
            raise errors.InvalidRequestError(f"ask about at most {MAX_TRAFFIC_TOPICS} topics at a time")
        traffic = self.metrics.traffic
        response = m.DescribeTrafficResponse(started_ms=traffic.started_ms)
        response.topics = [m.TopicTraffic(topic, *traffic.totals(topic)) for topic in request.topics]
        if request.history_scope is not None:
            response.history = [m.TrafficMinute(*minute) for minute in traffic.history(request.history_scope)]
        return response

    async def _report_damage(self, request: m.ReplicaDamagedRequest) -> m.ReplicaDamagedResponse:
        """Tell the controller a replica here is damaged (ReplicaRepair retries on errors)."""
        channel = self.controller_channel
        if channel is None:
            raise errors.NotControllerError("the controller channel is not started yet")
        await asyncio.wait_for(channel.registered.wait(), 10)
        request.broker_epoch = channel.broker_epoch
        return await channel.request(ApiKey.REPLICA_DAMAGED, request)

    async def _enforce_retention(self) -> None:
        self.logs.enforce_retention()

    async def _compact_logs(self) -> None:
        """Compact every cleanup.policy=compact log that rolled since its last cleaning."""
        for key, log_ in list(self.logs.logs.items()):
            if not log_.config.compact or self._compacted_through.get(key) == log_.active_segment.base_offset:
                continue
            compaction = cleaner.plan(log_)
            if compaction is None:
                continue
            try:
                result = await asyncio.to_thread(cleaner.build, compaction)
            except OSError as exc:  # a segment went away meanwhile (retention, topic deleted)
                log.info("compaction of %s-%d skipped: %s", *key, exc)
                continue
            if self.logs.logs.get(key) is log_:
                cleaner.swap(compaction, result)
                self._compacted_through[key] = compaction.active.base_offset

    async def _describe_credential(self, prefix: str) -> m.DescribeCredentialResponse:
        """An API key's digest and grant, from the controller (the CredentialStore caches it)."""
        if self.controller_channel is None:
            raise errors.AuthorizationFailedError("no controller to ask")
        return await self.controller_channel.request(
            ApiKey.DESCRIBE_CREDENTIAL, m.DescribeCredentialRequest(prefix=prefix), timeout_s=2.0
        )

    # -- produce -----------------------------------------------------------------------------

    # -- offsets and metadata ----------------------------------------------------------------------

    def advertised(self) -> tuple[str, int]:
        return (self.config.advertised_host or self.config.host, self.config.advertised_port or self.port)

    def kafka_advertised(self) -> tuple[str, int] | None:
        if self.config.kafka_host is None:
            return None
        return (self.config.kafka_advertised_host or self.config.kafka_host,
                self.config.kafka_advertised_port or self.kafka_port)

    def internal_advertised(self) -> tuple[str, int]:
        return (self.config.internal_advertised_host or self.config.internal_host,
                self.config.internal_advertised_port or self.internal_port)

    async def _metadata(self, request: m.MetadataRequest, session: Session) -> m.MetadataResponse:
        controller_address = ""
        channel = self.controller_channel
        if channel is not None:
            host, port = channel.controllers[channel.current]
            controller_address = f"{host}:{port}"
        return self.metadata.metadata(request, session.listener, controller_address)

    async def _api_versions(self, request: m.ApiVersionsRequest) -> m.ApiVersionsResponse:
        return m.ApiVersionsResponse(
            apis=[m.ApiVersion(api_key=int(k), min_version=lo, max_version=hi) for k, (lo, hi) in m.API_VERSIONS.items()]
        )

    # -- topic admin --------------------------------------------------------------------------------

    async def _create_topics(self, request: m.CreateTopicsRequest) -> m.CreateTopicsResponse:
        if self.controller_channel is not None:
            return await self.controller_channel.request(ApiKey.CREATE_TOPICS, request, timeout_s=_admin_timeout_s(request))
        _refuse_tenant_admin(request)
        results = []
        for topic in request.topics:
            result = m.TopicResult(name=topic.name)
            try:
                if self.metadata.cluster_mode:
                    raise InvalidRequestError("this broker is in a cluster: create topics through the controller")
                if topic.replication_factor != 1:
                    raise errors.InvalidReplicationFactorError(
                        f"replication factor {topic.replication_factor} needs a cluster; this broker runs alone"
                    )
                config = TopicConfig.from_settings(topic.partitions, topic.replication_factor, topic.configs)
                if not request.validate_only:
                    self.logs.create_topic(topic.name, config)
                    for p in range(config.partitions):
                        self.replicas.add_partition(self.logs.logs[(topic.name, p)]).make_standalone_leader()
            except BrokerError as exc:
                result.error_code, result.error_message = exc.errno, exc.message
            results.append(result)
        return m.CreateTopicsResponse(topics=results)

    async def _delete_topics(self, request: m.DeleteTopicsRequest) -> m.DeleteTopicsResponse:
        if self.controller_channel is not None:
            return await self.controller_channel.request(ApiKey.DELETE_TOPICS, request, timeout_s=_admin_timeout_s(request))
        _refuse_tenant_admin(request)
        results = []
        for name in request.names:
            result = m.TopicResult(name=name)
            try:
                if self.metadata.cluster_mode:
                    raise InvalidRequestError("this broker is in a cluster: delete topics through the controller")
                self._delete_local_topic(name)
                self.coordinator.forget_topics([name])
            except BrokerError as exc:
                result.error_code, result.error_message = exc.errno, exc.message
            results.append(result)
        return m.DeleteTopicsResponse(topics=results)

    async def _describe_topics(self, request: m.DescribeTopicsRequest) -> m.DescribeTopicsResponse:
        names = sorted(self.logs.topics) if request.names is None else request.names
        out = []
        for name in names:
            config = self.logs.topics.get(name)
            if config is None:
                out.append(m.TopicDescription(name=name, **unknown_topic(name)))
                continue
            partitions = []
            for p in range(config.partitions):
                partition = self.replicas.partitions.get((name, p))
                if partition is None:
                    continue  # not a replica here
                log_ = partition.log
                partitions.append(
                    m.PartitionDescription(
                        partition=p,
                        leader=partition.leader_id,
                        log_start_offset=log_.log_start_offset,
                        log_end_offset=log_.log_end_offset,
                        high_watermark=log_.high_watermark,
                        size_bytes=log_.size_bytes,
                        segments=len(log_.segments),
                    )
                )
            out.append(m.TopicDescription(name=name, configs=config.to_settings(), partitions=partitions))
        return m.DescribeTopicsResponse(topics=out)

    async def _create_partitions(self, request: m.CreatePartitionsRequest) -> m.CreatePartitionsResponse:
        if self.controller_channel is not None:
            return await self.controller_channel.request(ApiKey.CREATE_PARTITIONS, request, timeout_s=_admin_timeout_s(request))
        _refuse_tenant_admin(request)
        if self.metadata.cluster_mode:
            raise InvalidRequestError("this broker is in a cluster: add partitions through the controller")
        config = self.logs.topics.get(request.topic)
        if config is None:
            raise errors.UnknownTopicOrPartitionError(f"topic {request.topic!r} does not exist")
        if request.count <= config.partitions:
            raise errors.InvalidPartitionsError(f"topic {request.topic!r} has {config.partitions} partitions; partitions never shrink")
        TopicConfig.from_settings(request.count, config.replication_factor, config.to_settings())
        old = config.partitions
        self.logs.set_partition_count(request.topic, request.count)
        for p in range(old, request.count):
            self.replicas.add_partition(self.logs.add_replica(request.topic, p)).make_standalone_leader()
        return m.CreatePartitionsResponse()

    async def _alter_configs(self, request: m.AlterConfigsRequest) -> m.AlterConfigsResponse:
        if self.controller_channel is not None:
            return await self.controller_channel.request(ApiKey.ALTER_CONFIGS, request)
        if self.metadata.cluster_mode:
            raise InvalidRequestError("this broker is in a cluster: alter topic settings through the controller")
        config = self.logs.topics.get(request.topic)
        if config is None:
            raise errors.UnknownTopicOrPartitionError(f"topic {request.topic!r} does not exist")
        settings = altered_settings(config.to_settings(), request.set, request.delete)
        new_config = TopicConfig.from_settings(config.partitions, config.replication_factor, settings)
        self.logs.set_config(request.topic, new_config)
        return m.AlterConfigsResponse(configs=new_config.to_settings())

    def _delete_local_topic(self, name: str) -> None:
        self.repair.forget(name)
        self.replicas.remove_topic(name)
        self.logs.delete_topic(name)

    # -- controller requests -------------------------------------------------------------------------

    async def _cluster_state(self, request: m.ClusterStateRequest) -> m.ClusterStateResponse:
        """Apply the controller's view: metadata for all, roles for our replicas."""
        newer = self.metadata.apply(request)
        for name in request.deleted_topics:
            if name in self.logs.topics:
                self._delete_local_topic(name)
        self.coordinator.forget_topics(list(request.deleted_topics))
        for topic in request.topics:
            if topic.name in self.logs.topics:
                # Settings and partition count may have changed (ALTER_CONFIGS, CREATE_PARTITIONS).
                self.logs.set_config(topic.name, TopicConfig.from_settings(topic.partitions, topic.replication_factor, topic.configs))
        me = self.config.broker_id
        for state in newer:
            if me in state.replicas:
                self._apply_partition_state(state)
        self._sync_fetchers()
        self.coordinator.on_roles_changed()
        self.transactions.on_roles_changed()
        self.coordinator.queues.on_partition_states(newer)
        return m.ClusterStateResponse()

    def _apply_partition_state(self, state: m.PartitionState) -> None:
        key = (state.topic, state.partition)
        partition = self.replicas.partitions.get(key)
        if partition is None:
            topic = self.metadata.topics.get(state.topic)
            if topic is None:
                raise InvalidRequestError(f"partition state for {state.topic} without its topic")
            if state.topic not in self.logs.topics:
                config = TopicConfig.from_settings(topic.partitions, topic.replication_factor, topic.configs)
                self.logs.create_topic(state.topic, config, local_partitions=[])
            partition = self.replicas.add_partition(self.logs.add_replica(state.topic, state.partition))
        if state.leader_epoch == partition.leader_epoch and partition.role is not Role.NONE:
            if state.partition_epoch > partition.partition_epoch:
                partition.update_isr(state.isr, state.partition_epoch)
            return
        if state.leader == self.config.broker_id:
            partition.become_leader(leader_epoch=state.leader_epoch, partition_epoch=state.partition_epoch, replicas=state.replicas, isr=state.isr)
        else:
            partition.become_follower(
                leader_id=state.leader, leader_epoch=state.leader_epoch, partition_epoch=state.partition_epoch, replicas=state.replicas, isr=state.isr
            )
        self.repair.on_role_change(partition)

    def _sync_fetchers(self) -> None:
        """One replica fetcher per broker we follow; stop the ones no longer needed."""
        leaders = {p.leader_id for p in self.replicas.partitions.values() if p.role is Role.FOLLOWER and p.leader_id >= 0}
        for leader_id in list(self._fetchers):
            if leader_id not in leaders:
                fetcher = self._fetchers.pop(leader_id)
                asyncio.get_running_loop().create_task(fetcher.stop())
        for leader_id in leaders:
            fetcher = self._fetchers.get(leader_id)
            if fetcher is None:
                fetcher = self._fetchers[leader_id] = ReplicaFetcher(
                    broker_id=self.config.broker_id,
                    leader_id=leader_id,
                    address=self._broker_address,
                    credentials=self.peer_credentials,
                    ssl_context=self.peer_tls,
                    partitions=lambda leader_id=leader_id: [
                        p for p in self.replicas.partitions.values() if p.role is Role.FOLLOWER and p.leader_id == leader_id
                    ],
                    on_append=lambda p: self.replicas.wake(p.topic, p.partition),
                    on_fetched=self.repair.on_fetched,
                    fetch_wait_ms=self.config.replica_fetch_wait_ms,
                )
                fetcher.start()
            fetcher.wake()

    def _usage_replication(self) -> int:
        return min(3, max(1, len(self.metadata.brokers))) if self.metadata.cluster_mode else 1

    def _broker_address(self, broker_id: int) -> tuple[str, int] | None:
        """Broker ``broker_id``'s internal listener (replica fetches go there)."""
        return self.metadata.internal_listeners.get(broker_id)

    async def _find_coordinator(self, request: m.FindCoordinatorRequest, session) -> m.FindCoordinatorResponse:
        if request.group_type == "transaction":
            return await self.transactions.find_coordinator(request, session)
        return await self.coordinator.find_coordinator(request, session)

    async def _describe_transactions(self, request: m.DescribeTransactionsRequest) -> m.DescribeTransactionsResponse:
        return self.transactions.describe(request)

    async def _list_transactions(self, request: m.ListTransactionsRequest) -> m.ListTransactionsResponse:
        return self.transactions.list(request)

    def _peer_client(self):
        """A cluster client acting as this broker, through its own internal listener (not started)."""
        from tideway.native.client import TidewayClient

        host, port = self.internal_advertised()
        return TidewayClient(f"{host}:{port}", request_timeout_ms=10_000, credentials=self.peer_credentials,
                             ssl_context=self.peer_tls)


# A tenant's topic admin runs the control plane's queue actions (several cluster changes, each pushed to every
# broker): more time than the controller's own admin needs.
ADMIN_TIMEOUT_S = 10.0
TENANT_ADMIN_TIMEOUT_S = 30.0


def _admin_timeout_s(request) -> float:
    return TENANT_ADMIN_TIMEOUT_S if request.tenant_id is not None else ADMIN_TIMEOUT_S


def _refuse_tenant_admin(request) -> None:
    if request.tenant_id is not None:
        raise InvalidRequestError("this broker runs without a control plane: tenants' queues are created through one")
