"""The monitoring Celery worker (lag looks and alerts, with beat) for lag and alert tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from tests.harness.processes import REPO_ROOT

SAMPLE_S = 1


def start_monitoring_worker(plane, name: str = "monitoring") -> subprocess.Popen:
    log_file = open(plane.home / f"{name}.log", "ab")  # noqa: SIM115 - the child owns it
    process = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "tideway_server.controlplane", "worker", "-Q", "monitoring", "-c", "1", "-B",
         "-s", str(plane.home / f"{name}-beat-schedule"), "-n", f"{name}@%h", "--without-mingle", "--without-gossip",
         "--loglevel", "INFO"],
        cwd=REPO_ROOT, stdout=log_file, stderr=subprocess.STDOUT,
        env={**plane.env, "TIDEWAY_LAG_SAMPLE_S": str(SAMPLE_S)},
        start_new_session=True)  # its own process group: the pool and beat children go with it
    log_file.close()
    return process


def kill_monitoring_worker(process: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
    """Stop the worker and its children (killing only the parent left them running after the tests)."""
    try:
        os.killpg(process.pid, sig)
    except ProcessLookupError:
        pass
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)
