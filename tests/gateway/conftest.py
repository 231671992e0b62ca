"""Fixtures of the gateway tests: one deployment per module (SQLite) and a team-plan tenant."""

from __future__ import annotations

import pytest

from tests.harness.control_plane import running_control_plane


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    home = tmp_path_factory.mktemp("gateway")
    with running_control_plane(home, f"sqlite://{home}/control.sqlite3") as plane:
        yield plane


@pytest.fixture(scope="module")
def tenant(gateway):
    """(slug, key) of a team-plan tenant."""
    return gateway.create_tenant(plan="team")
