"""Shared fixtures: real broker processes on free loopback ports."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_port(port: int, timeout_s: float = 20.0, process: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"broker exited with {process.returncode} before listening")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listening on port {port} after {timeout_s}s")


class BrokerProcess:
    """A ``tideway broker`` subprocess with its data directory and log file."""

    def __init__(self, data_dir: Path, *, broker_id: int = 1, extra_args: list[str] | None = None) -> None:
        self.data_dir = data_dir
        self.broker_id = broker_id
        self.port = free_port()
        self.extra_args = extra_args or []
        self.log_path = data_dir.parent / f"broker-{broker_id}-{data_dir.name}.log"
        self.process: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> BrokerProcess:
        log_file = open(self.log_path, "ab")
        self.process = subprocess.Popen(
            [
                sys.executable, "-m", "tideway_cli.main", "--log-level", "INFO",
                "broker", "--id", str(self.broker_id), "--data", str(self.data_dir),
                "--listen", f"127.0.0.1:{self.port}", "--metrics-listen", "off", *self.extra_args,
            ],
            cwd=REPO_ROOT,
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
        log_file.close()
        wait_for_port(self.port, process=self.process)
        return self

    def signal(self, signum: int) -> None:
        assert self.process is not None
        self.process.send_signal(signum)

    def kill(self) -> None:
        """SIGKILL: no flush, no checkpoint, no clean-shutdown marker."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    def terminate(self) -> int:
        """SIGTERM and wait for the clean shutdown; returns the exit code."""
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(30)

    def restart(self) -> BrokerProcess:
        return self.start()

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


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


def run_cli(*args: str, input_bytes: bytes | None = None, timeout_s: float = 120) -> subprocess.CompletedProcess:
    """Run ``tideway ARGS`` as a user would, capturing output."""
    return subprocess.run(
        [sys.executable, "-m", "tideway_cli.main", *args],
        cwd=REPO_ROOT,
        input=input_bytes,
        capture_output=True,
        timeout=timeout_s,
        env={**os.environ, "TIDEWAY_LOG_LEVEL": "WARNING"},
    )
