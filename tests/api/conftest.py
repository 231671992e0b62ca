"""Fixtures of the control-plane API tests: a whole deployment on SQLite and on PostgreSQL."""

from __future__ import annotations

import subprocess
import uuid

import pytest

from tests.harness.control_plane import (
    running_control_plane,
)


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def control_plane(request, tmp_path_factory):
    home = tmp_path_factory.mktemp("control-plane")
    if request.param == "sqlite":
        database_url = f"sqlite://{home}/control.sqlite3"
    else:
        port = request.getfixturevalue("postgres_server")
        name = f"tideway_api_{uuid.uuid4().hex[:10]}"
        subprocess.run(["su", "postgres", "-c", f"psql -p {port} -h 127.0.0.1 -c \"CREATE DATABASE {name} OWNER tideway\""],
                       check=True, capture_output=True)
        database_url = f"postgres://tideway@127.0.0.1:{port}/{name}"
    with running_control_plane(home, database_url) as plane:
        yield plane
