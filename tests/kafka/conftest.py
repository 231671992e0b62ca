"""Fixtures of the Kafka-listener tests: one deployment per module (3 brokers, each with a Kafka listener) and two
tenants."""

from __future__ import annotations

import pytest

from tests.harness.control_plane import running_control_plane


@pytest.fixture(scope="module")
def plane(tmp_path_factory):
    home = tmp_path_factory.mktemp("kafka")
    with running_control_plane(home, f"sqlite://{home}/control.sqlite3") as plane:
        yield plane


@pytest.fixture(scope="module")
def tenant_a(plane):
    """(slug, key) of a team-plan tenant."""
    return plane.create_tenant(plan="team")


@pytest.fixture(scope="module")
def tenant_b(plane):
    return plane.create_tenant(plan="team")
