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

from tideway_server.brokers.security.keys import service_key

from tideway.native.credentials import ApiKey

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


def settle(busy_max: float = 0.10, timeout_s: float = 60.0) -> None:
    """Wait, before a measurement, until the disk holds no write-back of earlier phases and the machine is quiet.

    A phase that wrote a lot without fsync (a REST publish of a million messages, a
    broker's `flush: none` runs: 120 MB dirty here) leaves it for the kernel to write
    back up to 30 s later, in the middle of whatever is measured next; `sync` takes it
    now. Then this waits (up to ``timeout_s``) until the whole machine is below
    ``busy_max`` busy over half a second, as the peers' harness does before every
    measurement.
    """
    started = time.monotonic()
    os.sync()
    cpus = os.cpu_count() or 1
    while time.monotonic() - started < timeout_s:
        busy = machine_busy_cpu_s()
        time.sleep(0.5)
        if (machine_busy_cpu_s() - busy) / (0.5 * cpus) < busy_max:
            break
    waited = time.monotonic() - started
    if waited > 1.0:
        progress(f"waited {waited:.1f} s for the disk's write-back and a quiet machine")


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


def _descendants(root: int) -> list[int]:
    """``root`` and every process it started, directly or not (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    ppid = int(stat.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue  # gone meanwhile
            children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, ()))
    return found


def _usage(pid: int) -> tuple[str, float, float, int] | None:
    """A process's command line, CPU seconds in user mode and in the kernel, and voluntary context
    switches (its wake-ups, all threads)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            command = cmdline.read().replace(b"\0", b" ").decode(errors="replace")
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        tick = os.sysconf("SC_CLK_TCK")
        user_s, system_s = int(fields[11]) / tick, int(fields[12]) / tick
        wakeups = 0
        for thread in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{thread}/status") as status:
                for line in status:
                    if line.startswith("voluntary_ctxt_switches"):
                        wakeups += int(line.split()[1])
        return command, user_s, system_s, wakeups
    except (OSError, IndexError, ValueError):
        return None  # gone meanwhile


def deployment_role(command: str) -> str | None:
    """The deployment's processes by their command lines (running_control_plane's), for ``ProcessMeter``."""
    words = command.split()
    if "broker" in words and "--id" in words:
        return f"broker {words[words.index('--id') + 1]}"
    for word, name in (("serve", "gateway"), ("controller", "controller"), ("celery", "celery worker")):
        if word in words:
            return name
    return "redis" if "redis-server" in command else None


class ProcessMeter:
    """CPU and wake-ups of this process and every process it started, per named role, over one phase.

    ``name(command_line)`` names a process's role (None: "other"); this process is "bench clients".
    A process that ends before the phase does is not counted (its figures go with it).
    A wake-up is a voluntary context switch (the process slept and was woken): on a 2-core VM, a
    Python process woken after milliseconds of sleep spends several times the CPU of a warm one on
    the same work (bench/wakeup.py), so wake-ups per message explain CPU per message.
    """

    def __init__(self, name) -> None:
        self._name = name

    def _snapshot(self) -> dict[int, tuple[str, float, float, int]]:
        me = os.getpid()
        out = {}
        for pid in _descendants(me):
            usage = _usage(pid)
            if usage is not None:
                command, user_s, system_s, wakeups = usage
                out[pid] = ("bench clients" if pid == me else (self._name(command) or "other"), user_s, system_s, wakeups)
        return out

    def __enter__(self) -> ProcessMeter:
        self._start = self._snapshot()
        return self

    def __exit__(self, *exc_info) -> None:
        end = self._snapshot()
        self.cpu_s: dict[str, float] = {}
        self.system_s: dict[str, float] = {}
        self.wakeups: dict[str, int] = {}
        for pid, (name, user_s, system_s, wakeups) in end.items():
            _, user_s_0, system_s_0, wakeups_0 = self._start.get(pid, (name, 0.0, 0.0, 0))
            self.cpu_s[name] = self.cpu_s.get(name, 0.0) + user_s + system_s - user_s_0 - system_s_0
            self.system_s[name] = self.system_s.get(name, 0.0) + system_s - system_s_0
            self.wakeups[name] = self.wakeups.get(name, 0) + wakeups - wakeups_0

    def per_message(self, messages: int) -> dict[str, dict[str, float]]:
        """{role: {"cpu_us": CPU µs per message, "system_us": the part of it in the kernel (system calls:
        loopback TCP, epoll, disk writes), "wakeups": wake-ups per message}}, busiest first."""
        if not messages:
            return {}
        return {name: {"cpu_us": round(cpu_s / messages * 1e6), "system_us": round(self.system_s[name] / messages * 1e6),
                       "wakeups": round(self.wakeups[name] / messages, 2)}
                for name, cpu_s in sorted(self.cpu_s.items(), key=lambda item: -item[1])}
