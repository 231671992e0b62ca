"""Where the control plane sends clients of a cluster (clusters/admin.py ``bootstrap_of``).

The controller marks a broker alive or fenced; when it sees none alive (cut off from them, or away) the brokers
may still be serving, so clients are given every registered broker, not an error (issue 45: the gateway answered
500 to every publish while the controller was cut off from the brokers).
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db


def _cluster(states: list[str], bootstrap: str = ""):
    from tideway_server.clusters.models import Broker, Cluster

    cluster = Cluster.objects.create(name="local", bootstrap=bootstrap)
    for i, state in enumerate(states, start=1):
        Broker.objects.create(cluster=cluster, broker_id=i, host=f"10.0.0.{i}", port=9401, state=state)
    return cluster


def test_live_brokers_only_while_some_are_alive():
    from tideway_server.clusters.admin import bootstrap_of

    assert bootstrap_of(_cluster(["alive", "fenced", "alive"])) == "10.0.0.1:9401,10.0.0.3:9401"


def test_every_registered_broker_when_the_controller_sees_none_alive():
    from tideway_server.clusters.admin import bootstrap_of

    assert bootstrap_of(_cluster(["fenced", "fenced", "fenced"], bootstrap="seed:9401")) == \
        "10.0.0.1:9401,10.0.0.2:9401,10.0.0.3:9401"


def test_the_configured_list_before_any_broker_registered_and_an_error_without_one():
    from tideway_server.clusters.admin import bootstrap_of
    from tideway_server.controlplane.errors import ActionError

    assert bootstrap_of(_cluster([], bootstrap="seed-1:9401, seed-2:9401")) == "seed-1:9401,seed-2:9401"
    from tideway_server.clusters.models import Cluster

    Cluster.objects.all().delete()
    with pytest.raises(ActionError) as refused:
        bootstrap_of(_cluster([]))
    assert refused.value.code == "cluster_unavailable" and refused.value.status == 503
