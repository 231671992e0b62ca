"""Fixtures of the console's view tests (pytest-django): a cluster row and two tenants' owners."""

from __future__ import annotations

import pytest

from tests.harness.console import signup


@pytest.fixture
def cluster(db):
    from tideway_server.clusters.models import Cluster

    return Cluster.objects.create(name="local")


@pytest.fixture
def owner_a(db):
    return signup("alice")  # (user, tenant)


@pytest.fixture
def owner_b(db):
    return signup("bob")
