"""Console helpers for view tests: sign-up, queue rows, a signed-in test client."""

from __future__ import annotations

import itertools

PASSWORD = "correct horse battery"


_names = itertools.count(1)


def signup(name: str):
    from tideway_server.tenants.actions import do_signup

    return do_signup(username=name, password=PASSWORD, email=f"{name}@example.com", tenant_name=f"{name} inc")


def make_queue(tenant, cluster, name: str, **values):
    from tideway_server.topics.models import Queue

    return Queue.objects.create(tenant=tenant, cluster=cluster, name=name, status=values.pop("status", "active"), broker_topic=f"t{tenant.id}.{name}",
                                partitions=values.pop("partitions", 2), replication_factor=3,
                                retention_ms=86_400_000, retention_bytes=1 << 20, max_message_bytes=1 << 20, **values)


def signed_in(client, user):
    client.force_login(user)
    return client
