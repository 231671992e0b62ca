"""A running deployment for gateway tests: Redis, controller, 3 brokers, a Celery worker and `tideway serve` (SQLite).

The same processes as tests/api (whose fixtures run on both databases); the
gateway reads the database only through short caches, so one database here.
"""

from __future__ import annotations

import pytest

from tests.api.conftest import running_control_plane


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    home = tmp_path_factory.mktemp("gateway")
    with running_control_plane(home, f"sqlite://{home}/control.sqlite3") as plane:
        yield plane


@pytest.fixture(scope="module")
def tenant(gateway):
    """(slug, key) of a team-plan tenant."""
    return gateway.create_tenant(plan="team")


def make_queue(gateway, key: str, **settings) -> str:
    name = gateway.unique(settings.pop("prefix", "q"))
    with gateway.client(key) as api:
        answer = api.post("/api/v1/queues/", json={"name": name, "replication_factor": 3, "partitions": 2, **settings})
        assert answer.status_code == 201, answer.text
    return name
