"""What a broker knows about the cluster: brokers, their listeners, topics, partition states.

Standalone (no controller has ever spoken to the data directory) the broker
is the whole cluster: its topics are its logs and it leads every partition.
Once a controller has pushed cluster state (``CLUSTER_STATE``) the broker is
in cluster mode for good (``cluster.json`` in its data directory says so after
a restart): everything here comes from the controller, fenced by controller
epoch. Addresses depend on who asks: a peer on the internal listener is told
other brokers' internal listeners.

Ownership: the broker's event-loop thread.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable

from tideway_server.brokers.server.connection import Listener
from tideway_server.brokers.storage import LogManager, TopicConfig
from tideway_server.brokers.storage.files import write_atomically

from tideway.protocol import errors
from tideway.protocol import messages as m

__all__ = ["CLUSTER_FILE", "MetadataCache"]

log = logging.getLogger(__name__)

CLUSTER_FILE = "cluster.json"
Address = tuple[str, int]


class MetadataCache:
    def __init__(self, broker_id: int, logs: LogManager, *, advertised: Callable[[], Address],
                 internal_advertised: Callable[[], Address],
                 kafka_advertised: Callable[[], Address | None] = lambda: None) -> None:
        self.broker_id = broker_id
        self._logs = logs
        self._advertised = advertised
        self._internal_advertised = internal_advertised
        self._kafka_advertised = kafka_advertised
        self.cluster_mode = False
        self.controller_id = -1
        self.controller_epoch = -1
        self.brokers: dict[int, m.BrokerInfo] = {}
        self.internal_listeners: dict[int, Address] = {}
        self.kafka_listeners: dict[int, Address] = {}
        self.topics: dict[str, m.TopicState] = {}
        self.partitions: dict[tuple[str, int], m.PartitionState] = {}
        # topic_config's answers, built once per state the controller sent (a TopicConfig is frozen):
        # building one from its settings on every request was 4% of a queue coordinator's time.
        self._configs: dict[str, tuple[m.TopicState, TopicConfig]] = {}

    # -- the cluster file ------------------------------------------------------------------------

    def load(self) -> None:
        """Cluster mode and the last controller epoch from the data directory, if a controller ever spoke to it."""
        path = os.path.join(self._logs.data_dir, CLUSTER_FILE)
        try:
            with open(path) as f:
                state = json.load(f)
        except FileNotFoundError:
            return
        self.cluster_mode = True
        self.controller_epoch = int(state["controller_epoch"])
        log.info("cluster mode: waiting for the controller (last controller epoch %d)", self.controller_epoch)

    def _save(self) -> None:
        data = json.dumps({"controller_epoch": self.controller_epoch, "controller_id": self.controller_id}).encode()
        write_atomically(os.path.join(self._logs.data_dir, CLUSTER_FILE), data)

    # -- applying the controller's view ------------------------------------------------------------

    def apply(self, request: m.ClusterStateRequest) -> list[m.PartitionState]:
        """Take the controller's view; return the partition states newer than the ones known (to act on)."""
        if request.controller_epoch < self.controller_epoch:
            raise errors.StaleControllerEpochError(
                f"controller epoch {request.controller_epoch} is older than {self.controller_epoch}")
        if not self.cluster_mode or request.controller_epoch != self.controller_epoch or request.controller_id != self.controller_id:
            self.cluster_mode = True
            self.controller_epoch = request.controller_epoch
            self.controller_id = request.controller_id
            self._save()
        self.brokers = {b.node_id: b for b in request.brokers}
        self.internal_listeners = {a.node_id: (a.host, a.port) for a in request.internal_listeners}
        self.kafka_listeners = {a.node_id: (a.host, a.port) for a in request.kafka_listeners}
        for name in request.deleted_topics:
            self.topics.pop(name, None)
            self._configs.pop(name, None)
            for key in [k for k in self.partitions if k[0] == name]:
                del self.partitions[key]
        for topic in request.topics:
            self.topics[topic.name] = topic
        newer = []
        for state in request.partitions:
            key = (state.topic, state.partition)
            known = self.partitions.get(key)
            if known is not None and (state.leader_epoch, state.partition_epoch) < (known.leader_epoch, known.partition_epoch):
                continue  # an older state than one already applied
            self.partitions[key] = state
            newer.append(state)
        return newer

    # -- questions -----------------------------------------------------------------------------------

    def topic_config(self, topic: str) -> TopicConfig:
        """The settings of ``topic``; UnknownTopicOrPartitionError when the cluster has no such topic."""
        if self.cluster_mode:
            state = self.topics.get(topic)
            if state is None:
                raise errors.UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
            built = self._configs.get(topic)
            if built is None or built[0] is not state:
                built = self._configs[topic] = (state, TopicConfig.from_settings(state.partitions, state.replication_factor,
                                                                                   state.configs))
            return built[1]
        config = self._logs.topics.get(topic)
        if config is None:
            raise errors.UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
        return config

    def partition_count(self, topic: str) -> int | None:
        try:
            return self.topic_config(topic).partitions
        except errors.UnknownTopicOrPartitionError:
            return None

    def leader_of(self, topic: str, partition: int) -> int | None:
        """The leader the controller named for ``topic``-``partition`` (standalone: this broker), None if unknown."""
        if not self.cluster_mode:
            return self.broker_id if self.partition_count(topic) is not None else None
        state = self.partitions.get((topic, partition))
        return None if state is None else state.leader

    def address_of(self, broker_id: int, listener: Listener) -> Address | None:
        """Where a caller on ``listener`` reaches broker ``broker_id``: the same kind of listener (None: it has none
        of that kind, or this broker does not know it)."""
        if broker_id == self.broker_id:
            if listener is Listener.KAFKA:
                return self._kafka_advertised()
            return self._internal_advertised() if listener is Listener.INTERNAL else self._advertised()
        if listener is Listener.INTERNAL:
            return self.internal_listeners.get(broker_id)
        if listener is Listener.KAFKA:
            return self.kafka_listeners.get(broker_id)
        info = self.brokers.get(broker_id)
        return None if info is None else (info.host, info.port)

    def metadata(self, request: m.MetadataRequest, listener: Listener, controller_address: str) -> m.MetadataResponse:
        """The METADATA answer: brokers (at ``listener``'s kind of address), and the topics asked for."""
        if not self.cluster_mode:
            return self._standalone_metadata(request, listener)
        names = sorted(self.topics) if request.topics is None else request.topics
        topics = []
        for name in names:
            topic = self.topics.get(name)
            if topic is None:
                topics.append(m.TopicInfo(name=name, **unknown_topic(name)))
                continue
            partitions = []
            for p in range(topic.partitions):
                state = self.partitions.get((name, p))
                if state is None:
                    partitions.append(m.PartitionInfo(partition=p, leader=-1, error_code=errors.LeaderNotAvailableError.errno))
                else:
                    partitions.append(m.PartitionInfo(partition=p, leader=state.leader, leader_epoch=state.leader_epoch,
                                                      replicas=state.replicas, isr=state.isr))
            topics.append(m.TopicInfo(name=name, partitions=partitions))
        brokers = []
        for info in self.brokers.values():
            address = self.address_of(info.node_id, listener)
            if address is not None:
                brokers.append(m.BrokerInfo(node_id=info.node_id, host=address[0], port=address[1], rack=info.rack))
        return m.MetadataResponse(brokers=brokers, controller_id=self.controller_id, topics=topics,
                                  controller_address=controller_address)

    def _standalone_metadata(self, request: m.MetadataRequest, listener: Listener) -> m.MetadataResponse:
        me = self.broker_id
        host, port = self.address_of(me, listener)
        names = list(self._logs.topics) if request.topics is None else request.topics
        topics = []
        for name in names:
            config = self._logs.topics.get(name)
            if config is None:
                topics.append(m.TopicInfo(name=name, **unknown_topic(name)))
                continue
            partitions = [m.PartitionInfo(partition=p, leader=me, replicas=[me], isr=[me]) for p in range(config.partitions)]
            topics.append(m.TopicInfo(name=name, partitions=partitions))
        return m.MetadataResponse(brokers=[m.BrokerInfo(node_id=me, host=host, port=port)], controller_id=-1, topics=topics)


def unknown_topic(name: str) -> dict:
    """Error fields of a per-topic result for a topic this broker does not have."""
    return {"error_code": errors.UnknownTopicOrPartitionError.errno, "error_message": f"topic {name!r} does not exist"}
