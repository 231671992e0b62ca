"""The local-process provisioner: a controller and brokers on this machine."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tideway_server.clusters.provisioning.base import ClusterSpec


@dataclass(frozen=True)
class ProcessPlan:
    """One process to start: its name (for logs) and its `tideway` arguments."""

    name: str
    arguments: list[str]


class LocalProvisioner:
    """Starts the cluster's processes under ``home`` (state in home/broker-N, logs in home/logs)."""

    kind = "local"

    def __init__(self, home: str | Path = "var", python: str | None = None) -> None:
        self.home = Path(home)
        self.python = python or sys.executable

    def controller_address(self, spec: ClusterSpec) -> str:
        return f"{spec.host}:{spec.controller_port}"

    def broker_address(self, spec: ClusterSpec, broker_id: int) -> str:
        return f"{spec.host}:{spec.first_broker_port + broker_id - 1}"

    def bootstrap(self, spec: ClusterSpec) -> str:
        return ",".join(self.broker_address(spec, i) for i in range(1, spec.brokers + 1))

    def kafka_address(self, spec: ClusterSpec, broker_id: int) -> str:
        """The broker's Kafka listener: its client port + 200 (9601-9603 by default)."""
        return f"{spec.host}:{spec.first_broker_port + broker_id - 1 + 200}"

    def kafka_bootstrap(self, spec: ClusterSpec) -> str:
        return ",".join(self.kafka_address(spec, i) for i in range(1, spec.brokers + 1))

    def plan(self, spec: ClusterSpec) -> list[ProcessPlan]:
        """The processes, controller first (one: on one machine a standby adds nothing)."""
        controller = self.controller_address(spec)
        plans = [ProcessPlan("controller", ["controller", "--listen", controller, "--cluster", spec.name, "--no-migrate"])]
        for i in range(1, spec.brokers + 1):
            plans.append(ProcessPlan(f"broker-{i}", [
                "broker", "--id", str(i), "--data", str(self.home / f"broker-{i}"),
                "--listen", self.broker_address(spec, i), "--kafka-listen", self.kafka_address(spec, i),
                "--controller", controller,
                "--replica-lag-time-max-ms", str(spec.replica_lag_time_max_ms),
            ]))
        return plans

    def start(self, spec: ClusterSpec) -> list[tuple[str, subprocess.Popen]]:
        """Start every planned process, output appended to home/logs/NAME.log."""
        logs = self.home / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        started = []
        for plan in self.plan(spec):
            log_file = open(logs / f"{plan.name}.log", "ab")  # noqa: SIM115 - the child owns it
            process = subprocess.Popen([self.python, "-m", "tideway_server.cli.main", *plan.arguments],
                                       stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True)
            started.append((plan.name, process))
        return started
