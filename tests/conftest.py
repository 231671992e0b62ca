"""Fixtures of every test: broker processes, deployments, databases (tests/harness/processes.py starts them)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import subprocess
from pathlib import Path

import pytest

from tests.harness.processes import (
    BrokerProcess,
    ControllerProcess,
    Deployment,
    free_port,
)


@pytest.fixture
def broker_factory(tmp_path):
    """Start broker processes; every one is stopped when the test ends."""
    started: list[BrokerProcess] = []

    def make(name: str = "b1", **kwargs) -> BrokerProcess:
        broker = BrokerProcess(tmp_path / name, **kwargs).start()
        started.append(broker)
        return broker

    yield make
    for broker in started:
        broker.kill()


@pytest.fixture
def broker(broker_factory) -> BrokerProcess:
    return broker_factory()


@pytest.fixture
def deployment_factory(tmp_path, database_url):
    """Start a controller (or several) and brokers joined to it; all stopped at the end.

    Runs once on SQLite and once on PostgreSQL (the ``database_url`` fixture).
    """
    started: list = []

    def make(*, brokers: int = 3, controllers: int = 1, session_timeout_ms: int = 2000, lag_ms: int = 2000,
             broker_args=lambda broker_id: [], kafka: bool = False) -> Deployment:
        timing = ["--lease-ms", "2000", "--broker-session-timeout-ms", str(session_timeout_ms)]
        controller_processes = []
        for i in range(controllers):
            controller = ControllerProcess(tmp_path, f"controller-{i + 1}", extra_args=timing, database_url=database_url)
            controller.start(migrate=(i == 0))
            controller_processes.append(controller)
            started.append(controller)
        addresses = ",".join(c.address for c in controller_processes)
        broker_processes = {}
        for i in range(1, brokers + 1):
            broker = BrokerProcess(
                tmp_path / f"broker-{i}",
                broker_id=i,
                extra_args=["--controller", addresses, "--replica-lag-time-max-ms", str(lag_ms), *broker_args(i)],
                kafka=kafka,
            ).start()
            broker_processes[i] = broker
            started.append(broker)
        deployment = Deployment(controller_processes, broker_processes)
        # Every broker registered before the test begins (a loaded machine registers them slowly, and a replication
        # factor of 3 needs all three). In a thread: the tests calling this run in an event loop already.
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            pool.submit(asyncio.run, deployment.wait_until(
                lambda s: sum(b.state == "alive" for b in s.brokers) == brokers, 60, f"{brokers} live brokers")).result()
        return deployment

    yield make
    for process in reversed(started):
        process.kill()


@pytest.fixture(scope="session")
def postgres_server():
    """A PostgreSQL cluster of the test run's own, on a free port (needs Debian's postgresql).

    Skips when PostgreSQL is not installed, except under CI=true, where that is an error:
    infra/setup.sh installs it.
    """
    import shutil

    if shutil.which("pg_createcluster") is None or os.geteuid() != 0:
        if os.environ.get("CI") == "true":
            raise RuntimeError("PostgreSQL (pg_createcluster, run as root) is required in CI; run infra/setup.sh")
        pytest.skip("PostgreSQL server tools not installed")
    version = sorted(os.listdir("/usr/lib/postgresql"))[-1]
    name = f"tideway_test_{os.getpid()}"
    port = free_port()
    import tempfile

    # Not under pytest's tmp dir: its parents are root-only, and the server runs as postgres.
    parent = Path(tempfile.mkdtemp(prefix="tideway-pg-"))
    directory = parent / "data"
    subprocess.run(["chown", "postgres", str(parent)], check=True)
    subprocess.run(
        ["pg_createcluster", version, name, "-p", str(port), "-d", str(directory), "--", "--auth-local=trust", "--auth-host=trust"],
        check=True, capture_output=True,
    )
    try:
        subprocess.run(["pg_ctlcluster", version, name, "start"], check=True, capture_output=True)
        subprocess.run(
            ["su", "postgres", "-c", f"psql -p {port} -h 127.0.0.1 -c \"CREATE ROLE tideway LOGIN SUPERUSER\""],
            check=True, capture_output=True,
        )
        yield port
    finally:
        subprocess.run(["pg_ctlcluster", version, name, "stop", "-m", "immediate"], capture_output=True)
        subprocess.run(["pg_dropcluster", version, name], capture_output=True)
        shutil.rmtree(parent, ignore_errors=True)


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request, tmp_path):
    """DATABASE_URL for the control plane: a fresh SQLite file or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite://{tmp_path}/control.sqlite3"
    port = request.getfixturevalue("postgres_server")
    name = f"tideway_{abs(hash(tmp_path)) % 10**9}"
    subprocess.run(
        ["su", "postgres", "-c", f"psql -p {port} -h 127.0.0.1 -c \"CREATE DATABASE {name} OWNER tideway\""],
        check=True, capture_output=True,
    )
    return f"postgres://tideway@127.0.0.1:{port}/{name}"
