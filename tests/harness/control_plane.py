"""A whole deployment for API, gateway, console and lag tests: Redis, a controller, brokers, Celery workers and `tideway serve`."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import httpx

from tests.harness.processes import (
    REPO_ROOT,
    BrokerProcess,
    ControllerProcess,
    Deployment,
    RedisProcess,
    free_port,
    on_host,
    wait_for_port,
)


class ControlPlane:
    """The running API server and the cluster behind it."""

    def __init__(self, home: Path, database_url: str, deployment: Deployment, server: subprocess.Popen, port: int,
                 api_host=None) -> None:
        self.home = home
        self.database_url = database_url
        self.deployment = deployment
        self.server = server
        self.port = port
        self.api_host = api_host  # the host `tideway serve` runs on (None: this one)
        self.base_url = f"http://{'127.0.0.1' if api_host is None else api_host.address}:{port}"
        self._names = itertools.count(1)

    redis_url = ""

    @property
    def env(self) -> dict:
        return {**os.environ, "TIDEWAY_HOME": str(self.home), "DATABASE_URL": self.database_url, "TIDEWAY_LOG_LEVEL": "WARNING",
                "TIDEWAY_REDIS_URL": self.redis_url}

    def unique(self, prefix: str) -> str:
        return f"{prefix}-{uuid.uuid4().hex[:6]}-{next(self._names)}"

    def create_tenant(self, plan: str = "free") -> tuple[str, str]:
        """(tenant slug, API key with every scope), through `tideway tenant create`."""
        out = subprocess.run([sys.executable, "-m", "tideway_server.cli.main", "tenant", "create", self.unique("tenant"),
                              "--plan", plan, "--json"], cwd=REPO_ROOT, env=self.env, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        answer = json.loads(out.stdout)
        return answer["tenant"], answer["api_key"]

    def create_operator(self) -> tuple[str, str]:
        username, password = self.unique("operator"), "operator-password-1"
        out = subprocess.run([sys.executable, "manage.py", "createsuperuser", "--noinput", "--username", username,
                              "--email", f"{username}@example.com"], cwd=REPO_ROOT, capture_output=True, text=True,
                             env={**self.env, "DJANGO_SUPERUSER_PASSWORD": password}, timeout=60)
        assert out.returncode == 0, out.stderr
        return username, password

    def add_member(self, api: httpx.Client, username: str, role: str, password: str) -> httpx.Response:
        """A member as the product makes one: ``api`` (an owner's or admin's) invites, the invitee accepts over
        the API with their own user name and password. The acceptance's answer (201 and the member)."""
        invited = api.post("/api/v1/invitations/", json={"email": f"{username}@example.com", "role": role})
        assert invited.status_code == 201, invited.text
        with self.client() as anonymous:
            return anonymous.post("/api/v1/invitations/accept", json={
                "token": invited.json()["token"], "username": username, "password": password, "new_account": True})

    def client(self, key: str | None = None, **kwargs) -> httpx.Client:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.Client(base_url=self.base_url, headers=headers, timeout=60, **kwargs)

    gateways: list = []  # [(process, port)] of the gateways behind the balancer (running_control_plane(gateways=N))
    balancer = None  # HAProxy's process, with several gateways

    def kill_gateway(self, index: int) -> None:
        """SIGKILL gateway ``index`` (0-based) behind the balancer."""
        process, _ = self.gateways[index]
        process.kill()
        process.wait(10)

    def kill_server(self) -> None:
        """SIGKILL the ASGI server (a crash, not a shutdown)."""
        self.server.kill()
        self.server.wait(10)

    def start_server(self) -> None:
        """Start `tideway serve` again on the same port."""
        self.server, _ = _start_server(self.home, self.server_env, self.port, host=self.api_host)

    def describe(self):
        return asyncio.run(self.deployment.describe())


def _start_server(home: Path, env: dict, port: int | None = None, host=None,
                  log_name: str = "server.log") -> tuple[subprocess.Popen, int]:
    port = port or free_port()
    address = "127.0.0.1" if host is None else host.address
    log_file = open(home / log_name, "ab")
    process = subprocess.Popen(
        on_host(host, [sys.executable, "-m", "tideway_server.cli.main", "serve", "--listen", f"{address}:{port}", "--no-migrate"]),
        cwd=REPO_ROOT, stdout=log_file, stderr=subprocess.STDOUT, env=env,
    )
    log_file.close()
    wait_for_port(port, timeout_s=60, process=process, address=address)
    return process, port


def start_worker(home: Path, env: dict, host=None) -> subprocess.Popen:
    """A Celery worker (dead-letter redrives), as `tideway up` starts one."""
    log_file = open(home / "worker.log", "ab")
    process = subprocess.Popen(
        on_host(host, [sys.executable, "-m", "celery", "-A", "tideway_server.controlplane", "worker", "-c", "1", "--without-mingle",
                   "--without-gossip", "--loglevel", "INFO"]),
        cwd=REPO_ROOT, stdout=log_file, stderr=subprocess.STDOUT, env=env,
    )
    log_file.close()
    return process


@contextlib.contextmanager
def running_control_plane(home: Path, database_url: str, *, broker_metrics: bool = False, network=None,
                          gateways: int = 1):
    """Redis, a controller, 3 brokers (each with a Kafka listener too), a Celery worker and `tideway serve`, stopped
    afterwards.

    ``broker_metrics``: each broker serves /metrics on a port of its own (``plane.broker_metrics``
    lists the URLs), for tests that count what the brokers were asked.
    ``network`` (tests/harness/hosts.py): every process on a host of its own — "redis", "controller", "b1".."b3",
    "api" (`tideway serve` and the Celery worker) — so that a test can cut links between them (the database is
    a file: use SQLite).
    ``gateways``: with 2 or more, as many `tideway serve` processes behind HAProxy configured as `tideway up
    --gateways N` does (tideway_server/cli/balancer.py); ``plane.base_url`` is the balancer's (loopback only).
    """
    assert gateways == 1 or network is None, "several gateways run on loopback only"
    hosts = {name: None if network is None else network.add_host(name)
             for name in ("redis", "controller", "b1", "b2", "b3", "api")}
    redis_server = RedisProcess(home / "redis", host=hosts["redis"])
    env = {**os.environ, "TIDEWAY_HOME": str(home), "DATABASE_URL": database_url, "TIDEWAY_REDIS_URL": redis_server.url}
    if hosts["api"] is not None:  # clients name the API by its host's address
        env["TIDEWAY_ALLOWED_HOSTS"] = f"{hosts['api'].address},127.0.0.1,localhost"
    controller = ControllerProcess(home, "controller", database_url=database_url, host=hosts["controller"],
                                   extra_args=["--lease-ms", "2000", "--broker-session-timeout-ms", "3000"]).start(migrate=True)
    processes = [controller]
    server = worker = plane = balancer = None
    servers: list = []
    try:
        brokers = {}
        metrics_urls = []
        for i in range(1, 4):
            extra = ["--controller", controller.address]
            if broker_metrics:
                port = free_port()
                address = "127.0.0.1" if hosts[f"b{i}"] is None else hosts[f"b{i}"].address
                extra += ["--metrics-listen", f"{address}:{port}"]
                metrics_urls.append(f"http://{address}:{port}/metrics")
            broker = BrokerProcess(home / f"broker-{i}", broker_id=i, extra_args=extra, kafka=True, host=hosts[f"b{i}"])
            brokers[i] = broker.start()
            processes.append(broker)
        deployment = Deployment([controller], brokers)
        asyncio.run(deployment.wait_until(lambda s: sum(b.state == "alive" for b in s.brokers) == 3, 60, "3 live brokers"))
        worker = start_worker(home, env, host=hosts["api"])
        if gateways == 1:
            server, port = _start_server(home, env, host=hosts["api"])
        else:
            from tideway_server.cli.balancer import start_haproxy

            for i in range(1, gateways + 1):
                servers.append(_start_server(home, env, log_name=f"server-{i}.log"))
            port = free_port()
            with open(home / "balancer.log", "ab") as log_file:
                balancer = start_haproxy(home / "haproxy.cfg", f"127.0.0.1:{port}",
                                         [f"127.0.0.1:{p}" for _, p in servers], log_file=log_file)
            wait_for_port(port, process=balancer)
        plane = ControlPlane(home, database_url, deployment, server, port, api_host=hosts["api"])
        plane.gateways, plane.balancer = servers, balancer
        plane.redis_url = redis_server.url
        plane.broker_metrics = metrics_urls
        plane.server_env = env
        yield plane
    finally:
        # A test may have restarted the server: stop the one running now.
        for process in (plane.server if plane is not None else server, worker, balancer, *(p for p, _ in servers)):
            if process is not None and process.poll() is None:
                process.terminate()
                try:
                    process.wait(10)
                except subprocess.TimeoutExpired:
                    process.kill()
        for process in reversed(processes):
            process.kill()
        redis_server.stop()
        # Every process's log (gateway, controller, brokers, workers): what went wrong, for whoever ran this.
        for log in sorted(home.rglob("*.log")):
            if log.stem.isdigit():
                continue  # a log segment, not a process's log
            lines = log.read_text(errors="replace").splitlines()
            errors = sum(1 for line in lines if "Traceback" in line or " ERROR " in line)
            print(f"{log.relative_to(home)}: {errors} errors and tracebacks", file=sys.stderr)
