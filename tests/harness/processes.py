"""Real processes on free loopback ports: brokers, controllers, Redis, deployments, the CLI.

Authentication is on everywhere, as in production: the test run has a cluster
secret of its own (``TIDEWAY_CLUSTER_SECRET``, inherited by every process it
starts), and clients act with the operator's service key derived from it
(``TIDEWAY_API_KEY``) unless a test gives them a tenant's key.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]

CLUSTER_SECRET_HEX = os.environ.setdefault("TIDEWAY_CLUSTER_SECRET", os.urandom(32).hex())


def _operator_key() -> str:
    from tideway_server.brokers.security.keys import service_key

    return service_key(bytes.fromhex(CLUSTER_SECRET_HEX), "operator")


OPERATOR_KEY = os.environ.setdefault("TIDEWAY_API_KEY", _operator_key())


def free_port() -> int:
    """A port free now, below Linux's ephemeral range (32768-60999).

    A port the kernel handed out for binding to 0 comes from the ephemeral
    range, where any process's outgoing connection may take it before the
    server that was meant to listen on it starts (a broker then exits with
    "address already in use"); ports below the range are only ever taken by
    listeners.
    """
    import random

    for _ in range(1_000):
        port = random.randrange(20_000, 32_000)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port below the ephemeral range")


def wait_for_port(port: int, timeout_s: float = 20.0, process: subprocess.Popen | None = None,
                  address: str = "127.0.0.1") -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"{process.args[0] if isinstance(process.args, list) else process.args} exited with {process.returncode} before listening on {address}:{port}")
        try:
            with socket.create_connection((address, port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listening on port {port} after {timeout_s}s")


def self_signed_certificate(directory: Path) -> tuple[str, str]:
    """(certificate, key) PEM files of a self-signed certificate for 127.0.0.1 (also its own CA)."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=1))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    return str(cert_path), str(key_path)


class RedisProcess:
    """A redis-server of the test's own, on a free port (never the system's 6379); with ``host``
    (tests/harness/hosts.py), on that host's address."""

    def __init__(self, home: Path, host=None) -> None:
        self.port = free_port()
        address = "127.0.0.1" if host is None else host.address
        self.url = f"redis://{address}:{self.port}/0"
        home.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            on_host(host, ["redis-server", "--bind", address, "--port", str(self.port), "--save", "", "--appendonly", "no",
                       "--dir", str(home), "--logfile", str(home / "redis.log"),
                       # On a host of its own its clients are not on loopback: protected mode would refuse them
                       # (the network is the test's private bridge).
                       *(["--protected-mode", "no"] if host is not None else [])]),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        wait_for_port(self.port, timeout_s=20, process=self.process, address=address)

    def stop(self) -> None:
        self.process.kill()
        self.process.wait(10)


def on_host(host, argv: list[str]) -> list[str]:
    """``argv`` as run on ``host`` (tests/harness/hosts.py: a network namespace of its own), or here if None."""
    return argv if host is None else host.command(argv)


class BrokerProcess:
    """A ``tideway broker`` subprocess with its data directory and log file.

    With ``host`` (tests/harness/hosts.py), it runs in that host's namespace and listens on its address, on
    the usual ports (the address is its own); else on free loopback ports.
    """

    HOSTED_INTERNAL_PORT = 9501  # the internal listener's port on a host of its own

    def __init__(self, data_dir: Path, *, broker_id: int = 1, extra_args: list[str] | None = None,
                 kafka: bool = False, host=None, env: dict[str, str] | None = None) -> None:
        self.data_dir = data_dir
        self.broker_id = broker_id
        self.host = host
        self.env = env  # added to this process's environment
        self.address = "127.0.0.1" if host is None else host.address
        self.port = free_port() if host is None else 9401
        self.internal_port = free_port() if host is None else self.HOSTED_INTERNAL_PORT
        # a Kafka listener (brokers/kafka/) on a port of its own
        self.kafka_port = None if not kafka else free_port() if host is None else 9601
        self.extra_args = extra_args or []
        self.log_path = data_dir.parent / f"broker-{broker_id}-{data_dir.name}.log"
        self.process: subprocess.Popen | None = None
        self._started = False

    @property
    def bootstrap(self) -> str:
        return f"{self.address}:{self.port}"

    @property
    def kafka_bootstrap(self) -> str:
        assert self.kafka_port is not None, "this broker has no Kafka listener (kafka=True)"
        return f"{self.address}:{self.kafka_port}"

    def start(self) -> BrokerProcess:
        for attempt in range(3):
            log_file = open(self.log_path, "ab")
            logged_before = log_file.tell()
            self.process = subprocess.Popen(
                on_host(self.host, [
                    sys.executable, "-m", "tideway_server.cli.main", "--log-level", "INFO",
                    "broker", "--id", str(self.broker_id), "--data", str(self.data_dir),
                    "--listen", self.bootstrap, "--internal-listen", f"{self.address}:{self.internal_port}",
                    "--metrics-listen", "off",
                    *(["--kafka-listen", self.kafka_bootstrap] if self.kafka_port is not None else []),
                    *self.extra_args,
                ]),
                cwd=REPO_ROOT,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env=None if self.env is None else {**os.environ, **self.env},
            )
            log_file.close()
            try:
                wait_for_port(self.port, process=self.process, address=self.address)
            except RuntimeError:
                # Another process took a port between free_port() and the broker's bind: on a first
                # start, new ports (a restart keeps its ports: clients know them).
                taken = "address already in use" in self.log_path.read_bytes()[logged_before:].decode(errors="replace")
                if self._started or not taken or attempt == 2 or self.host is not None:
                    raise
                self.port, self.internal_port = free_port(), free_port()
                if self.kafka_port is not None:
                    self.kafka_port = free_port()
                continue
            self._started = True
            return self
        raise AssertionError("unreachable")

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


def run_cli(*args: str, input_bytes: bytes | None = None, timeout_s: float = 120) -> subprocess.CompletedProcess:
    """Run ``tideway ARGS`` as a user would, capturing output."""
    return subprocess.run(
        [sys.executable, "-m", "tideway_server.cli.main", *args],
        cwd=REPO_ROOT,
        input=input_bytes,
        capture_output=True,
        timeout=timeout_s,
        env={**os.environ, "TIDEWAY_LOG_LEVEL": "WARNING"},
    )


class ControllerProcess:
    """A ``tideway controller`` subprocess sharing the test's control-plane database."""

    def __init__(self, home: Path, name: str, *, extra_args: list[str] | None = None, database_url: str | None = None,
                 host=None) -> None:
        self.home = home
        self.name = name
        self.database_url = database_url
        self.host = host  # as BrokerProcess's
        self.port = free_port() if host is None else 9400
        self.extra_args = extra_args or []
        self.log_path = home / f"{name}.log"
        self.process: subprocess.Popen | None = None

    @property
    def address(self) -> str:
        return f"{'127.0.0.1' if self.host is None else self.host.address}:{self.port}"

    def start(self, *, migrate: bool = True) -> ControllerProcess:
        log_file = open(self.log_path, "ab")
        self.process = subprocess.Popen(
            on_host(self.host, [
                sys.executable, "-m", "tideway_server.cli.main", "controller", "--listen", self.address,
                *([] if migrate else ["--no-migrate"]), *self.extra_args,
            ]),
            cwd=REPO_ROOT,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env={**os.environ, "TIDEWAY_HOME": str(self.home), **({"DATABASE_URL": self.database_url} if self.database_url else {})},
        )
        log_file.close()
        wait_for_port(self.port, timeout_s=60, process=self.process, address=self.address.rsplit(":", 1)[0])
        return self

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


class Deployment:
    """Controllers and brokers of one test cluster, with helpers to watch it."""

    def __init__(self, controllers: list[ControllerProcess], brokers: dict[int, BrokerProcess]) -> None:
        self.controllers = controllers
        self.brokers = brokers

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values())

    @property
    def kafka_bootstrap(self) -> str:
        return ",".join(b.kafka_bootstrap for b in self.brokers.values())

    async def describe(self):
        from tideway.native.conn import connect
        from tideway.protocol import errors
        from tideway.protocol import messages as m
        from tideway.protocol.messages import ApiKey

        last: Exception | None = None
        for controller in self.controllers:
            if controller.process is None or controller.process.poll() is not None:
                continue
            try:
                from tideway.native import credentials

                connection = await connect(controller.address.rsplit(":", 1)[0], controller.port, timeout_s=2,
                                           credentials=credentials.ApiKey(OPERATOR_KEY))
                try:
                    return await connection.request(ApiKey.DESCRIBE_CLUSTER, m.DescribeClusterRequest(), timeout_s=5)
                finally:
                    connection.close()
            except errors.TidewayError as exc:
                last = exc
        raise AssertionError(f"no active controller: {last}")

    async def wait_until(self, predicate, timeout_s: float = 30.0, what: str = "condition"):

        deadline = time.monotonic() + timeout_s
        last = None
        while time.monotonic() < deadline:
            try:
                last = await self.describe()
                if predicate(last):
                    return last
            except AssertionError:
                pass
            await asyncio.sleep(0.1)
        raise AssertionError(f"{what} not reached in {timeout_s}s; last state: {last}")

    def partition(self, state, topic: str, partition: int):
        return next(p for p in state.partitions if p.topic == topic and p.partition == partition)
