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
        ("Deployment", "eu-1-gateway"),
        ("NetworkPolicy", "eu-1-broker"),
        ("NetworkPolicy", "eu-1-controller"),
        ("NetworkPolicy", "eu-1-gateway"),
        ("PodDisruptionBudget", "eu-1-broker"),
        ("PodDisruptionBudget", "eu-1-controller"),
        ("PodDisruptionBudget", "eu-1-gateway"),
        ("Service", "eu-1-brokers"),
        ("Service", "eu-1-controllers"),
        ("Service", "eu-1-gateway"),
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


def test_gateways_are_a_deployment_behind_a_service_sharing_the_signing_key_and_redis():
    """Issue 45: N stateless gateways; the Service is the balancer; what they share comes from Secrets."""
    spec = ClusterSpec(name="eu-1", gateways=3, api_hosts="api.example.com")
    by_name = {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(KubernetesProvisioner().render(spec))}
    deployment = by_name[("Deployment", "eu-1-gateway")]["spec"]
    assert deployment["replicas"] == 3
    assert deployment["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    pod = deployment["template"]["spec"]["containers"][0]
    assert "tideway serve --listen 0.0.0.0:8000 --no-migrate" in pod["command"][-1]
    secrets = {ref["secretRef"]["name"] for ref in pod["envFrom"] if "secretRef" in ref}
    assert secrets == {"eu-1-cluster-secret", "tideway-database", "tideway-control-plane"}
    env = {e["name"]: e["value"] for e in pod["env"]}
    assert env == {"TIDEWAY_ENV": "production", "TIDEWAY_ALLOWED_HOSTS": "api.example.com"}
    service = by_name[("Service", "eu-1-gateway")]["spec"]
    assert service["selector"] == deployment["selector"]["matchLabels"] and "clusterIP" not in service
    assert deployment["template"]["metadata"]["labels"]["tideway.io/control-plane"] == "true"  # may reach the controller
    default_hosts = ClusterSpec(name="eu-1")
    pod = next(d for d in KubernetesProvisioner().manifests(default_hosts) if d["kind"] == "Deployment")
    hosts = next(e["value"] for e in pod["spec"]["template"]["spec"]["containers"][0]["env"] if e["name"] == "TIDEWAY_ALLOWED_HOSTS")
    assert "*" not in hosts and "eu-1-gateway.tideway.svc" in hosts.split(",")


def test_local_provisioner_plans_a_controller_and_each_broker(tmp_path):
    spec = ClusterSpec(name="local", brokers=3, controller_port=9500, first_broker_port=9501)
    plans = LocalProvisioner(home=tmp_path).plan(spec)
    assert [p.name for p in plans] == ["controller", "broker-1", "broker-2", "broker-3"]
    assert plans[3].arguments[plans[3].arguments.index("--listen") + 1] == "127.0.0.1:9503"
    assert plans[3].arguments[plans[3].arguments.index("--kafka-listen") + 1] == "127.0.0.1:9703"
    assert LocalProvisioner(home=tmp_path).bootstrap(spec) == "127.0.0.1:9501,127.0.0.1:9502,127.0.0.1:9503"


@pytest.mark.parametrize("values", [{"brokers": 0}, {"controllers": 9}, {"storage_gib": 0}, {"gateways": 0}, {"colour": "blue"}])
def test_bad_specs_are_refused(values):
    with pytest.raises(ValueError):
        ClusterSpec.from_dict("x", values)


KUBERNETES_VERSION = "1.30"


def rendered(**overrides) -> list[dict]:
    spec = ClusterSpec(**{"name": "eu-1", "region": "eu", "brokers": 3, "controllers": 2, **overrides})
    return list(yaml.safe_load_all(KubernetesProvisioner().render(spec)))


@pytest.mark.parametrize("shape", [{}, {"brokers": 1, "controllers": 1}, {"brokers": 9, "controllers": 3}])
def test_every_manifest_is_valid_against_kubernetes_schemas(shape):
    """kubernetes-validate: each document against Kubernetes' own OpenAPI schemas, strictly (an unknown or
    misspelt field is an error, as kubectl's server-side validation would make it)."""
    import kubernetes_validate

    for document in rendered(**shape):
        kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)


def test_the_validation_catches_a_misspelt_field():
    import kubernetes_validate

    statefulset = next(d for d in rendered() if d["kind"] == "StatefulSet")
    statefulset["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(statefulset, KUBERNETES_VERSION, strict=True)


def policy_violations(documents: list[dict]) -> list[str]:
    """The manifests' policy, as kube-linter and kube-score check it: every container locked down, sized and
    probed; every workload covered by a disruption budget and a network policy; no secret in plain sight."""
    found = []
    workloads = [d for d in documents if d["kind"] in ("StatefulSet", "Deployment", "DaemonSet")]
    budgets = [d["spec"]["selector"]["matchLabels"] for d in documents if d["kind"] == "PodDisruptionBudget"]
    policies = [d["spec"]["podSelector"]["matchLabels"] for d in documents if d["kind"] == "NetworkPolicy"]
    for workload in workloads:
        name = workload["metadata"]["name"]
        pod = workload["spec"]["template"]["spec"]
        labels = workload["spec"]["template"]["metadata"]["labels"]
        if workload["spec"]["selector"]["matchLabels"].items() - labels.items():
            found.append(f"{name}: its selector does not select its own pods")
        if not any(selector.items() <= labels.items() for selector in budgets):
            found.append(f"{name}: no PodDisruptionBudget")
        if not any(selector.items() <= labels.items() for selector in policies):
            found.append(f"{name}: no NetworkPolicy")
        if pod.get("automountServiceAccountToken", True):
            found.append(f"{name}: mounts a service account token it does not need")
        security = pod.get("securityContext", {})
        if not security.get("runAsNonRoot") or security.get("runAsUser", 0) == 0:
            found.append(f"{name}: may run as root")
        if security.get("seccompProfile", {}).get("type") != "RuntimeDefault":
            found.append(f"{name}: no seccomp profile")
        if any(pod.get(key) for key in ("hostNetwork", "hostPID", "hostIPC")):
            found.append(f"{name}: shares the node's namespaces")
        if any("hostPath" in volume for volume in pod.get("volumes", [])):
            found.append(f"{name}: mounts a path of the node")
        for container in pod["containers"]:
            where = f"{name}/{container['name']}"
            context = container.get("securityContext", {})
            if context.get("privileged") or context.get("allowPrivilegeEscalation", True):
                found.append(f"{where}: may gain privileges")
            if not context.get("readOnlyRootFilesystem"):
                found.append(f"{where}: writable root filesystem")
            if context.get("capabilities", {}).get("drop") != ["ALL"]:
                found.append(f"{where}: keeps Linux capabilities")
            resources = container.get("resources", {})
            if not {"cpu", "memory"} <= resources.get("requests", {}).keys() or "memory" not in resources.get("limits", {}):
                found.append(f"{where}: no CPU and memory requests and memory limit")
            for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
                if probe not in container:
                    found.append(f"{where}: no {probe}")
            if ":" not in container["image"].rsplit("/", 1)[-1] and "@" not in container["image"]:
                found.append(f"{where}: image without a tag")
            for variable in container.get("env", []):
                if "value" in variable and any(w in variable["name"].upper() for w in ("SECRET", "PASSWORD", "TOKEN")):
                    found.append(f"{where}: {variable['name']} in plain sight (use a Secret)")
    return found


def test_the_manifests_follow_the_policy():
    assert policy_violations(rendered()) == []


def test_the_policy_check_finds_each_kind_of_violation():
    documents = rendered()
    broker = next(d for d in documents if d["metadata"]["name"] == "eu-1-broker" and d["kind"] == "StatefulSet")
    pod = broker["spec"]["template"]["spec"]
    container = pod["containers"][0]
    pod["automountServiceAccountToken"] = True
    pod["securityContext"]["runAsNonRoot"] = False
    pod["hostNetwork"] = True
    container["securityContext"]["allowPrivilegeEscalation"] = True
    container["securityContext"]["readOnlyRootFilesystem"] = False
    del container["livenessProbe"]
    del container["resources"]["limits"]
    container["env"] = [{"name": "TIDEWAY_CLUSTER_SECRET", "value": "00" * 32}]
    documents = [d for d in documents if not (d["kind"] == "PodDisruptionBudget" and "broker" in d["metadata"]["name"])]
    found = "\n".join(policy_violations(documents))
    for expected in ("no PodDisruptionBudget", "service account token", "may run as root", "node's namespaces",
                     "may gain privileges", "writable root filesystem", "no livenessProbe", "memory limit",
                     "TIDEWAY_CLUSTER_SECRET in plain sight"):
        assert expected in found, (expected, found)
