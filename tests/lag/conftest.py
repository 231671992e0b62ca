"""Fixtures of the lag tests: a deployment with a Celery worker on the monitoring queue, looking every second."""

from __future__ import annotations

import signal

import pytest

from tests.harness.control_plane import running_control_plane
from tests.harness.monitoring import kill_monitoring_worker, start_monitoring_worker


@pytest.fixture(scope="module")
def plane(tmp_path_factory):
    home = tmp_path_factory.mktemp("lag")
    with running_control_plane(home, f"sqlite://{home}/control.sqlite3") as plane:
        worker = start_monitoring_worker(plane)
        plane.monitoring = worker
        try:
            yield plane
        finally:
            kill_monitoring_worker(plane.monitoring, signal.SIGTERM)
