"""Prometheus metrics of one broker (its own registry, so tests may run several), and the endpoint serving them.

Many families are labelled by topic, and topics are named after their tenants (``t2.orders``): hosted means
hostile, so the endpoint gives them only to a scraper that proves it belongs to the deployment, with
``Authorization: Bearer <service key>`` (any of the deployment's service keys; ``tideway up`` writes one to
``$TIDEWAY_HOME/metrics-token`` for Prometheus's ``credentials_file``). Without it (or with a wrong one) the
answer holds only the families that name no topic: request latencies, refusals, authentication failures, queue
memory, scrubbing. A wrong token is not an error, so a scraper misconfigured still sees the broker's health.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import ThreadingWSGIServer, make_wsgi_app
from tideway_server.brokers.security.keys import service_name_of
from tideway_server.brokers.server.traffic import Traffic

if TYPE_CHECKING:
    from tideway_server.brokers.storage import LogManager

__all__ = ["BrokerMetrics", "serve_metrics"]

TENANT_LABELS = frozenset({"topic"})  # labels whose values name a tenant's objects


class _LogSizeCollector:
    """Reports log size and offsets per partition at scrape time."""

    def __init__(self, logs: Callable[[], LogManager]) -> None:
        self._logs = logs

    def collect(self) -> Iterable[Metric]:
        size = GaugeMetricFamily("tideway_log_size_bytes", "Bytes on disk per partition", labels=["topic", "partition"])
        end = GaugeMetricFamily("tideway_log_end_offset", "Next offset to be written", labels=["topic", "partition"])
        start = GaugeMetricFamily("tideway_log_start_offset", "First offset kept", labels=["topic", "partition"])
        for (topic, partition), log_ in list(self._logs().logs.items()):
            labels = [topic, str(partition)]
            size.add_metric(labels, log_.size_bytes)
            end.add_metric(labels, log_.log_end_offset)
            start.add_metric(labels, log_.log_start_offset)
        return [size, end, start]


class _TrafficCollector:
    """Reports the traffic counters per topic at scrape time (counting stays a few additions)."""

    def __init__(self, traffic: Traffic) -> None:
        self._traffic = traffic

    def collect(self) -> Iterable[Metric]:
        families = [
            CounterMetricFamily("tideway_messages_in", "Records appended for producers", labels=["topic"]),
            CounterMetricFamily("tideway_bytes_in", "Batch bytes appended for producers", labels=["topic"]),
            CounterMetricFamily("tideway_messages_out", "Records served to consumers and queue receivers", labels=["topic"]),
            CounterMetricFamily("tideway_bytes_out", "Bytes served to consumers and queue receivers", labels=["topic"]),
        ]
        for topic, counts in self._traffic.topics():
            for family, value in zip(families, counts, strict=True):
                family.add_metric([topic], value)
        return families


class _QueueStateCollector:
    """Reports how many queue share-partitions this broker holds in memory and how many it unloaded (idle)."""

    def __init__(self, counts: Callable[[], tuple[int, int, int]]) -> None:
        self._counts = counts

    def collect(self) -> Iterable[Metric]:
        loaded, unloaded, window_records = self._counts()
        shares = GaugeMetricFamily("tideway_queue_share_partitions",
                                   "Queue groups' share-partitions coordinated here, in memory or unloaded while idle",
                                   labels=["state"])
        shares.add_metric(["loaded"], loaded)
        shares.add_metric(["unloaded"], unloaded)
        records = GaugeMetricFamily("tideway_queue_window_records",
                                    "Records held in memory in the loaded share-partitions' windows")
        records.add_metric([], window_records)
        return [shares, records]


class BrokerMetrics:
    def __init__(self, logs: Callable[[], LogManager]) -> None:
        self.registry = CollectorRegistry()
        self.traffic = Traffic()
        self.registry.register(_TrafficCollector(self.traffic))
        self.request_latency = Histogram(
            "tideway_request_latency_seconds",
            "Time from a request's arrival to its answer",
            ["api"],
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=self.registry,
        )
        self._request_latency_by_api: dict[enum.Enum, Histogram] = {}
        self.connections_refused = Counter(
            "tideway_connections_refused", "Connections refused or closed by a limit", ["listener", "reason"],
            registry=self.registry,
        )
        self.authentication_failures = Counter(
            "tideway_authentication_failures", "Failed SASL authentications", ["mechanism"], registry=self.registry
        )
        self.requests_refused = Counter(
            "tideway_requests_refused", "Requests refused by authentication or authorization", ["api", "error"],
            registry=self.registry,
        )
        self.corrupt_batches = Counter(
            "tideway_corrupt_batches", "Batches found failing their CRC (by reads, loads or the scrubber)", ["topic"],
            registry=self.registry,
        )
        self.replica_repairs = Counter(
            "tideway_replica_repairs", "Damaged replicas repaired by copying from the leader again", ["topic"],
            registry=self.registry,
        )
        self.scrubbed_bytes = Counter("tideway_scrubbed_bytes", "Log bytes re-read and CRC-checked by the scrubber",
                                      registry=self.registry)
        self.registry.register(_LogSizeCollector(logs))

    def observe_request(self, api: enum.Enum, seconds: float) -> None:
        """One request's time to its answer; the API's histogram child is looked up once (every request comes here)."""
        child = self._request_latency_by_api.get(api)
        if child is None:
            child = self._request_latency_by_api[api] = self.request_latency.labels(api.name)
        child.observe(seconds)

    def watch_queues(self, counts: Callable[[], tuple[int, int, int]]) -> None:
        """Report the queue service's (loaded, unloaded, window records) at every scrape."""
        self.registry.register(_QueueStateCollector(counts))


class _WithoutTenants:
    """The families of ``registry`` none of whose samples carries a label that names a tenant."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry

    def collect(self) -> Iterable[Metric]:
        for family in self._registry.collect():
            if not any(TENANT_LABELS.intersection(sample.labels) for sample in family.samples):
                yield family


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the standard library's name
        """Scrapes are not logged (one every few seconds from every scraper)."""


def serve_metrics(metrics: BrokerMetrics, host: str, port: int, cluster_secret: bytes) -> ThreadingWSGIServer:
    """Serve ``/metrics`` on ``host``:``port`` in a thread: everything to a bearer of a service key, else the
    families that name no tenant. Stop it with ``shutdown()``."""
    public = CollectorRegistry()
    public.register(_WithoutTenants(metrics.registry))
    full_app, public_app = make_wsgi_app(metrics.registry), make_wsgi_app(public)

    def app(environ, start_response):
        scheme, _, token = environ.get("HTTP_AUTHORIZATION", "").partition(" ")
        trusted = scheme.lower() == "bearer" and service_name_of(token.strip(), cluster_secret) is not None
        return (full_app if trusted else public_app)(environ, start_response)

    server = make_server(host, port, app, ThreadingWSGIServer, handler_class=_QuietHandler)
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server
