"""Kubernetes manifests rendered for a cluster spec parse as YAML with the expected kinds and counts."""

from __future__ import annotations

import pytest
import yaml
from tideway_server.clusters.provisioning import (
    ClusterSpec,
    KubernetesProvisioner,
    LocalProvisioner,
)


def test_three_broker_cluster_manifests():
    spec = ClusterSpec(name="eu-1", region="eu", brokers=3, controllers=2, storage_gib=250, image="registry.example/tideway:1.0")
    documents = list(yaml.safe_load_all(KubernetesProvisioner().render(spec)))
    kinds = sorted((d["kind"], d["metadata"]["name"]) for d in documents)
    assert kinds == [
        ("ConfigMap", "eu-1-config"),
        ("NetworkPolicy", "eu-1-broker"),
        ("NetworkPolicy", "eu-1-controller"),
        ("PodDisruptionBudget", "eu-1-broker"),
        ("Service", "eu-1-brokers"),
        ("Service", "eu-1-controllers"),
        ("StatefulSet", "eu-1-broker"),
        ("StatefulSet", "eu-1-controller"),
    ]
    by_name = {(d["kind"], d["metadata"]["name"]): d for d in documents}
    brokers = by_name[("StatefulSet", "eu-1-broker")]["spec"]
    assert brokers["replicas"] == 3 and brokers["serviceName"] == "eu-1-brokers"
    assert brokers["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"] == "250Gi"
    assert brokers["template"]["spec"]["containers"][0]["image"] == "registry.example/tideway:1.0"
    assert brokers["selector"]["matchLabels"] == brokers["template"]["metadata"]["labels"]
    assert by_name[("StatefulSet", "eu-1-controller")]["spec"]["replicas"] == 2
    assert by_name[("Service", "eu-1-brokers")]["spec"]["clusterIP"] == "None"  # headless: stable pod names
    assert by_name[("PodDisruptionBudget", "eu-1-broker")]["spec"]["maxUnavailable"] == 1
    controllers = by_name[("ConfigMap", "eu-1-config")]["data"]["TIDEWAY_CONTROLLER"].split(",")
    assert len(controllers) == 2 and all(a.endswith(":9400") for a in controllers)
    assert all(d["metadata"]["namespace"] == "tideway" for d in documents)
    assert len(KubernetesProvisioner().bootstrap(spec).split(",")) == 3


def test_manifests_separate_the_listeners_enable_tls_and_keep_internal_ports_inside():
    """Issue 14: the client and Kafka ports are open, the internal and metrics ports and the controller only to the
    cluster's pods."""
    spec = ClusterSpec(name="eu-1", region="eu", brokers=3, controllers=2)
    by_name = {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(KubernetesProvisioner().render(spec))}
    broker = by_name[("StatefulSet", "eu-1-broker")]["spec"]["template"]["spec"]
    script = broker["containers"][0]["command"][-1]
    for flag in ("--listen 0.0.0.0:9092", "--internal-listen 0.0.0.0:9094", "--kafka-listen 0.0.0.0:9095",
                 "--kafka-advertise", "--certfile", "--keyfile", "--cafile"):
        assert flag in script
    assert {"secretRef": {"name": "eu-1-cluster-secret"}} in broker["containers"][0]["envFrom"]
    controller = by_name[("StatefulSet", "eu-1-controller")]["spec"]["template"]["spec"]["containers"][0]
    assert "--certfile" in controller["command"][-1]
    assert {"secretRef": {"name": "eu-1-cluster-secret"}} in controller["envFrom"]
    ingress = by_name[("NetworkPolicy", "eu-1-broker")]["spec"]["ingress"]
    open_rules = [rule for rule in ingress if "from" not in rule]
    assert [port["port"] for rule in open_rules for port in rule["ports"]] == [9092, 9095]
    restricted = {port["port"] for rule in ingress if "from" in rule for port in rule["ports"]}
    assert restricted == {9093, 9094}
    controller_ingress = by_name[("NetworkPolicy", "eu-1-controller")]["spec"]["ingress"]
    assert all("from" in rule for rule in controller_ingress)
    rendered = KubernetesProvisioner().render(spec)
    assert "TIDEWAY_CLUSTER_SECRET:" not in rendered  # the secret is never in a manifest


def test_local_provisioner_plans_a_controller_and_each_broker(tmp_path):
    spec = ClusterSpec(name="local", brokers=3, controller_port=9500, first_broker_port=9501)
    plans = LocalProvisioner(home=tmp_path).plan(spec)
    assert [p.name for p in plans] == ["controller", "broker-1", "broker-2", "broker-3"]
    assert plans[3].arguments[plans[3].arguments.index("--listen") + 1] == "127.0.0.1:9503"
    assert plans[3].arguments[plans[3].arguments.index("--kafka-listen") + 1] == "127.0.0.1:9703"
    assert LocalProvisioner(home=tmp_path).bootstrap(spec) == "127.0.0.1:9501,127.0.0.1:9502,127.0.0.1:9503"


@pytest.mark.parametrize("values", [{"brokers": 0}, {"controllers": 9}, {"storage_gib": 0}, {"colour": "blue"}])
def test_bad_specs_are_refused(values):
    with pytest.raises(ValueError):
        ClusterSpec.from_dict("x", values)
