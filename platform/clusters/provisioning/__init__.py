"""Provisioners build broker clusters from a ClusterSpec.

* ``LocalProvisioner`` (the default) starts a controller and brokers as
  processes on this machine; ``tideway up`` and the tests use it.
* ``KubernetesProvisioner`` renders the manifests (ConfigMap, headless
  Service, StatefulSet, PodDisruptionBudget, controller Deployment and
  Service) that run the same cluster on Kubernetes; ``kubectl apply`` them.
"""

from tideway_server.clusters.provisioning.base import ClusterSpec, Provisioner
from tideway_server.clusters.provisioning.kubernetes import KubernetesProvisioner
from tideway_server.clusters.provisioning.local import LocalProvisioner

__all__ = ["ClusterSpec", "KubernetesProvisioner", "LocalProvisioner", "Provisioner"]
