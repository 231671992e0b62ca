"""Helpers shared by the benchmark scripts (not part of any measurement).

Benchmarks run with authentication on, as a deployment does: importing this
module gives the run a cluster secret of its own (``TIDEWAY_CLUSTER_SECRET``,
inherited by the brokers and controllers it starts) and makes clients act
with the operator's service key (``TIDEWAY_API_KEY``) derived from it.
"""

from __future__ import annotations

import os
import socket
import sys
import time

from brokers.client.credentials import ApiKey
from brokers.security.keys import service_key

CLUSTER_SECRET_HEX = os.environ.setdefault("TIDEWAY_CLUSTER_SECRET", os.urandom(32).hex())
OPERATOR_KEY = os.environ.setdefault("TIDEWAY_API_KEY", service_key(bytes.fromhex(CLUSTER_SECRET_HEX), "operator"))
OPERATOR = ApiKey(OPERATOR_KEY)


def progress(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_port(port: int, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"nothing listening on port {port} after {timeout_s}s")


def machine_busy_cpu_s() -> float:
    """Busy CPU seconds of the whole machine so far (every process: clients, brokers, the kernel's network work)."""
    with open("/proc/stat") as stat:
        user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in stat.readline().split()[1:9])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


class CpuMeter:
    """Wall time and the machine's busy CPU over one measured phase.

    Client and servers share this machine, so the cost of a message is what
    the whole machine spent on it: ``cpu_s_per_million(messages)``.
    """

    def __enter__(self) -> CpuMeter:
        self.started, self.busy_at_start = time.perf_counter(), machine_busy_cpu_s()
        return self

    def __exit__(self, *exc_info) -> None:
        self.seconds = time.perf_counter() - self.started
        self.cpu_s = machine_busy_cpu_s() - self.busy_at_start

    def cpu_s_per_million(self, messages: int) -> float | None:
        return round(self.cpu_s / messages * 1e6, 2) if messages else None
