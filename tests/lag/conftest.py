"""A deployment for lag tests: the gateway's processes plus a Celery worker on the ``monitoring`` queue with beat,
looking at every group every second (TIDEWAY_LAG_SAMPLE_S=1)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.api.conftest import running_control_plane
from tests.conftest import REPO_ROOT

SAMPLE_S = 1


def start_monitoring_worker(plane, name: str = "monitoring") -> subprocess.Popen:
    log_file = open(plane.home / f"{name}.log", "ab")  # noqa: SIM115 - the child owns it
    process = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "controlplane", "worker", "-Q", "monitoring", "-c", "1", "-B",
         "-s", str(plane.home / f"{name}-beat-schedule"), "-n", f"{name}@%h", "--without-mingle", "--without-gossip",
         "--loglevel", "INFO"],
        cwd=REPO_ROOT / "platform", stdout=log_file, stderr=subprocess.STDOUT,
        env={**plane.env, "TIDEWAY_LAG_SAMPLE_S": str(SAMPLE_S)})
    log_file.close()
    return process


@pytest.fixture(scope="module")
def plane(tmp_path_factory):
    home = tmp_path_factory.mktemp("lag")
    with running_control_plane(home, f"sqlite://{home}/control.sqlite3") as plane:
        worker = start_monitoring_worker(plane)
        plane.monitoring = worker
        try:
            yield plane
        finally:
            if plane.monitoring.poll() is None:
                plane.monitoring.terminate()
                try:
                    plane.monitoring.wait(10)
                except subprocess.TimeoutExpired:
                    plane.monitoring.kill()
