"""The Kubernetes provisioner: manifests rendered from a cluster spec.

Brokers run as a StatefulSet behind a headless Service, so broker N keeps
its name (``<cluster>-broker-<N-1>``) and its volume across restarts; the
broker id is the pod's ordinal + 1. A PodDisruptionBudget lets at most one
broker be voluntarily evicted at a time (with replication factor 3 and
min.insync.replicas 2, acks=all writes go on). Controllers run as a second
StatefulSet behind their own headless Service (one active, the rest standing
by on the shared database); brokers are given every controller's address.

Security (docs/security.md): each broker has a client listener (``BROKER_PORT``,
the port tenants' clients reach), a Kafka listener (``KAFKA_PORT``: Kafka's wire
protocol, SASL/PLAIN with tenants' keys) and an internal listener
(``INTERNAL_PORT``: replication, the controller, coordinators), both with TLS
from the Secret ``<cluster>-tls`` (``tls.crt``, ``tls.key``, ``ca.crt``, e.g.
issued by cert-manager); the cluster secret comes from the Secret
``<cluster>-cluster-secret`` (key ``TIDEWAY_CLUSTER_SECRET``, 64 hex
characters, made once per deployment: ``openssl rand -hex 32``). Both are
created by the operator, never rendered here. A NetworkPolicy admits anyone
to the client port only: the internal and metrics ports and the controller
answer pods of this cluster (and pods labelled ``tideway.io/metrics: "true"``
for metrics, ``tideway.io/control-plane: "true"`` for the controller). Per-topic
metrics go only to a scraper sending the metrics service key as its bearer
token (``tideway cluster metrics-token`` prints it from the cluster secret; the
operator keeps it in a Secret for Prometheus, docs/operations.md).
"""

from __future__ import annotations

import yaml
from tideway_server.clusters.provisioning.base import ClusterSpec

BROKER_PORT = 9092
METRICS_PORT = 9093
INTERNAL_PORT = 9094
KAFKA_PORT = 9095
CONTROLLER_PORT = 9400
GATEWAY_PORT = 8000
TLS_DIRECTORY = "/etc/tideway/tls"
RUN_AS = 10001  # the pods' user and group (not root; the image needs no user of its own)
CONTROLLER_CPU, CONTROLLER_MEMORY = "500m", "1Gi"  # a controller holds the cluster's metadata, not its data
GATEWAY_CPU, GATEWAY_MEMORY = "1", "1Gi"  # a gateway holds connections and short caches, no data


class KubernetesProvisioner:
    kind = "kubernetes"

    def __init__(self, database_secret: str = "tideway-database", control_plane_secret: str = "tideway-control-plane") -> None:
        self.database_secret = database_secret  # a Secret with DATABASE_URL, created by the operator
        # A Secret with TIDEWAY_SECRET_KEY (signs browser tokens: the same for every gateway) and TIDEWAY_REDIS_URL
        # (rate limits and dedup windows, shared by every gateway), created by the operator.
        self.control_plane_secret = control_plane_secret

    def bootstrap(self, spec: ClusterSpec) -> str:
        service = f"{spec.name}-brokers.{spec.namespace}.svc"
        return ",".join(f"{spec.name}-broker-{i}.{service}:{BROKER_PORT}" for i in range(spec.brokers))

    def manifests(self, spec: ClusterSpec) -> list[dict]:
        labels = {"app.kubernetes.io/name": "tideway", "app.kubernetes.io/instance": spec.name}
        broker_labels = {**labels, "app.kubernetes.io/component": "broker"}
        controller_labels = {**labels, "app.kubernetes.io/component": "controller"}
        controller_service = f"{spec.name}-controllers"
        controller_addresses = ",".join(
            f"{spec.name}-controller-{i}.{controller_service}.{spec.namespace}.svc:{CONTROLLER_PORT}" for i in range(spec.controllers)
        )
        meta = lambda name, extra=None: {"name": name, "namespace": spec.namespace, "labels": {**labels, **(extra or {})}}  # noqa: E731
        config = {
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": meta(f"{spec.name}-config"),
            "data": {
                "TIDEWAY_CLUSTER": spec.name,
                "TIDEWAY_CONTROLLER": controller_addresses,
                "TIDEWAY_REPLICA_LAG_TIME_MAX_MS": str(spec.replica_lag_time_max_ms),
            },
        }
        env_from = [{"configMapRef": {"name": f"{spec.name}-config"}}, {"secretRef": {"name": f"{spec.name}-cluster-secret"}}]
        tls = f"--certfile {TLS_DIRECTORY}/tls.crt --keyfile {TLS_DIRECTORY}/tls.key --cafile {TLS_DIRECTORY}/ca.crt"
        pod_address = f"$HOSTNAME.{spec.name}-brokers.{spec.namespace}.svc"
        broker_script = (
            'id=$(( ${HOSTNAME##*-} + 1 )); exec tideway broker --id "$id" --data /data '
            f'--listen 0.0.0.0:{BROKER_PORT} --advertise "{pod_address}:{BROKER_PORT}" '
            f'--internal-listen 0.0.0.0:{INTERNAL_PORT} --internal-advertise "{pod_address}:{INTERNAL_PORT}" '
            f'--kafka-listen 0.0.0.0:{KAFKA_PORT} --kafka-advertise "{pod_address}:{KAFKA_PORT}" '
            f'--metrics-listen 0.0.0.0:{METRICS_PORT} --controller "$TIDEWAY_CONTROLLER" {tls} '
            '--replica-lag-time-max-ms "$TIDEWAY_REPLICA_LAG_TIME_MAX_MS"'
        )
        tls_volume = {"name": "tls", "secret": {"secretName": f"{spec.name}-tls", "defaultMode": 0o400}}
        tls_mount = {"name": "tls", "mountPath": TLS_DIRECTORY, "readOnly": True}
        # Locked down (tests/unit/test_kubernetes_manifests.py checks each rule): a user of its own, no privilege
        # escalation, no capabilities, a read-only root filesystem (data and /tmp are volumes), no API token.
        tmp_volume, tmp_mount = {"name": "tmp", "emptyDir": {}}, {"name": "tmp", "mountPath": "/tmp"}
        pod_security = {"runAsNonRoot": True, "runAsUser": RUN_AS, "runAsGroup": RUN_AS, "fsGroup": RUN_AS,
                        "seccompProfile": {"type": "RuntimeDefault"}}
        container_security = {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                              "capabilities": {"drop": ["ALL"]}}

        def probes(port: int) -> dict:
            # A broker recovering a large log listens only once it is done: startup may take an hour before
            # liveness applies; liveness then restarts a process that stopped accepting connections for a minute.
            return {"startupProbe": {"tcpSocket": {"port": port}, "periodSeconds": 10, "failureThreshold": 360},
                    "livenessProbe": {"tcpSocket": {"port": port}, "periodSeconds": 10, "failureThreshold": 6},
                    "readinessProbe": {"tcpSocket": {"port": port}, "periodSeconds": 5}}
        headless = {
            "apiVersion": "v1", "kind": "Service", "metadata": meta(f"{spec.name}-brokers", {"app.kubernetes.io/component": "broker"}),
            "spec": {
                "clusterIP": "None", "publishNotReadyAddresses": True, "selector": broker_labels,
                "ports": [{"name": "tideway", "port": BROKER_PORT}, {"name": "internal", "port": INTERNAL_PORT},
                          {"name": "kafka", "port": KAFKA_PORT}, {"name": "metrics", "port": METRICS_PORT}],
            },
        }
        statefulset = {
            "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": meta(f"{spec.name}-broker", {"app.kubernetes.io/component": "broker"}),
            "spec": {
                "serviceName": f"{spec.name}-brokers", "replicas": spec.brokers, "podManagementPolicy": "Parallel",
                "selector": {"matchLabels": broker_labels},
                "template": {
                    "metadata": {"labels": broker_labels},
                    "spec": {
                        "terminationGracePeriodSeconds": 60,  # a broker flushes and checkpoints on SIGTERM
                        "automountServiceAccountToken": False, "securityContext": pod_security,
                        "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
                            "weight": 100,
                            "podAffinityTerm": {"labelSelector": {"matchLabels": broker_labels}, "topologyKey": "kubernetes.io/hostname"},
                        }]}},
                        "containers": [{
                            "name": "broker", "image": spec.image, "command": ["/bin/sh", "-c", broker_script],
                            "envFrom": env_from,
                            "ports": [{"name": "tideway", "containerPort": BROKER_PORT},
                                      {"name": "internal", "containerPort": INTERNAL_PORT},
                                      {"name": "kafka", "containerPort": KAFKA_PORT},
                                      {"name": "metrics", "containerPort": METRICS_PORT}],
                            **probes(BROKER_PORT),
                            "resources": {"requests": {"cpu": spec.cpu, "memory": spec.memory}, "limits": {"memory": spec.memory}},
                            "securityContext": container_security,
                            "volumeMounts": [{"name": "data", "mountPath": "/data"}, tls_mount, tmp_mount],
                        }],
                        "volumes": [tls_volume, tmp_volume],
                    },
                },
                "volumeClaimTemplates": [{
                    "metadata": {"name": "data"},
                    "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": f"{spec.storage_gib}Gi"}}},
                }],
            },
        }
        budget = {
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": meta(f"{spec.name}-broker"),
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": broker_labels}},
        }
        controller_budget = {
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": meta(f"{spec.name}-controller"),
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": controller_labels}},
        }
        controller = {
            "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": meta(f"{spec.name}-controller", {"app.kubernetes.io/component": "controller"}),
            "spec": {
                "serviceName": controller_service, "replicas": spec.controllers, "selector": {"matchLabels": controller_labels},
                "template": {
                    "metadata": {"labels": controller_labels},
                    "spec": {
                        "automountServiceAccountToken": False, "securityContext": pod_security,
                        "containers": [{
                            "name": "controller", "image": spec.image,
                            "command": ["/bin/sh", "-c",
                                        f"exec tideway controller --listen 0.0.0.0:{CONTROLLER_PORT} --cluster {spec.name} {tls}"],
                            "envFrom": [*env_from, {"secretRef": {"name": self.database_secret}}],
                            "ports": [{"name": "controller", "containerPort": CONTROLLER_PORT}],
                            **probes(CONTROLLER_PORT),
                            "resources": {"requests": {"cpu": CONTROLLER_CPU, "memory": CONTROLLER_MEMORY},
                                          "limits": {"memory": CONTROLLER_MEMORY}},
                            "securityContext": container_security,
                            "volumeMounts": [tls_mount, tmp_mount],
                        }],
                        "volumes": [tls_volume, tmp_volume],
                    },
                },
            },
        }
        controller_svc = {
            "apiVersion": "v1", "kind": "Service", "metadata": meta(controller_service, {"app.kubernetes.io/component": "controller"}),
            "spec": {"clusterIP": "None", "selector": controller_labels, "ports": [{"name": "controller", "port": CONTROLLER_PORT}]},
        }
        cluster_pods = {"podSelector": {"matchLabels": labels}}
        broker_policy = {
            "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": meta(f"{spec.name}-broker"),
            "spec": {
                "podSelector": {"matchLabels": broker_labels},
                "policyTypes": ["Ingress"],
                "ingress": [
                    {"ports": [{"port": BROKER_PORT}, {"port": KAFKA_PORT}]},  # client and Kafka listeners: tenants' keys
                    {"from": [cluster_pods], "ports": [{"port": INTERNAL_PORT}]},
                    {"from": [cluster_pods, {"podSelector": {"matchLabels": {"tideway.io/metrics": "true"}}}],
                     "ports": [{"port": METRICS_PORT}]},
                ],
            },
        }
        controller_policy = {
            "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": meta(f"{spec.name}-controller"),
            "spec": {
                "podSelector": {"matchLabels": controller_labels},
                "policyTypes": ["Ingress"],
                "ingress": [{"from": [cluster_pods, {"podSelector": {"matchLabels": {"tideway.io/control-plane": "true"}}}],
                             "ports": [{"port": CONTROLLER_PORT}]}],
            },
        }
        gateway = self._gateways(spec, meta, labels, env_from, pod_security, container_security, tmp_volume, tmp_mount)
        return [config, headless, statefulset, budget, controller, controller_svc, controller_budget, broker_policy,
                controller_policy, *gateway]

    def _gateways(self, spec: ClusterSpec, meta, labels: dict, env_from: list, pod_security: dict,
                  container_security: dict, tmp_volume: dict, tmp_mount: dict) -> list[dict]:
        """The API and data gateway: a Deployment of ``spec.gateways`` stateless pods behind a Service, which is
        the balancer (keys and queues come from the database, rate limits and dedup windows from Redis, browser
        tokens are signed with the shared TIDEWAY_SECRET_KEY: any pod takes any request). Plain HTTP inside the
        cluster: an Ingress or a LoadBalancer in front of the Service ends TLS."""
        name = f"{spec.name}-gateway"
        gateway_labels = {**labels, "app.kubernetes.io/component": "gateway"}
        service_hosts = f"{name},{name}.{spec.namespace}.svc,{name}.{spec.namespace}.svc.cluster.local"
        deployment = {
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta(name, {"app.kubernetes.io/component": "gateway"}),
            "spec": {
                "replicas": spec.gateways, "selector": {"matchLabels": gateway_labels},
                # One new pod up before one old one goes: never fewer gateways than asked for during a rollout.
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
                "template": {
                    # tideway.io/control-plane: the management API reaches the controller (its NetworkPolicy).
                    "metadata": {"labels": {**gateway_labels, "tideway.io/control-plane": "true"}},
                    "spec": {
                        "automountServiceAccountToken": False, "securityContext": pod_security,
                        "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
                            "weight": 100,
                            "podAffinityTerm": {"labelSelector": {"matchLabels": gateway_labels}, "topologyKey": "kubernetes.io/hostname"},
                        }]}},
                        "containers": [{
                            "name": "gateway", "image": spec.image,
                            "command": ["/bin/sh", "-c", f"exec tideway serve --listen 0.0.0.0:{GATEWAY_PORT} --no-migrate"],
                            "envFrom": [*env_from, {"secretRef": {"name": self.database_secret}},
                                        {"secretRef": {"name": self.control_plane_secret}}],
                            "env": [{"name": "TIDEWAY_ENV", "value": "production"},
                                    {"name": "TIDEWAY_ALLOWED_HOSTS", "value": spec.api_hosts or service_hosts}],
                            "ports": [{"name": "http", "containerPort": GATEWAY_PORT}],
                            "startupProbe": {"tcpSocket": {"port": GATEWAY_PORT}, "periodSeconds": 2, "failureThreshold": 60},
                            "livenessProbe": {"tcpSocket": {"port": GATEWAY_PORT}, "periodSeconds": 10, "failureThreshold": 6},
                            "readinessProbe": {"tcpSocket": {"port": GATEWAY_PORT}, "periodSeconds": 2, "failureThreshold": 2},
                            "resources": {"requests": {"cpu": GATEWAY_CPU, "memory": GATEWAY_MEMORY},
                                          "limits": {"memory": GATEWAY_MEMORY}},
                            "securityContext": container_security,
                            "volumeMounts": [tmp_mount],
                        }],
                        "volumes": [tmp_volume],
                    },
                },
            },
        }
        service = {
            "apiVersion": "v1", "kind": "Service", "metadata": meta(name, {"app.kubernetes.io/component": "gateway"}),
            "spec": {"selector": gateway_labels, "ports": [{"name": "http", "port": GATEWAY_PORT, "targetPort": "http"}]},
        }
        budget = {
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": meta(name),
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": gateway_labels}},
        }
        policy = {
            "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": meta(name),
            "spec": {"podSelector": {"matchLabels": gateway_labels}, "policyTypes": ["Ingress"],
                     "ingress": [{"ports": [{"port": GATEWAY_PORT}]}]},  # tenants' keys and tokens, on every request
        }
        return [deployment, service, budget, policy]

    def render(self, spec: ClusterSpec) -> str:
        """All manifests as one multi-document YAML stream, ready for ``kubectl apply -f -``."""
        return yaml.safe_dump_all(self.manifests(spec), sort_keys=False)
