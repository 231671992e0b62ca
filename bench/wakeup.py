"""What a wake-up costs on this machine: two Python processes, one message back and forth.

A parent sends 100 bytes over a socket pair, a forked child sends them back;
the parent sleeps ``gap`` between round trips. Printed for each gap: CPU µs
per round trip in each process, and the round trip's p50 / p99 (µs).

Back to back, a round trip is two warm wake-ups. After a sleep of a few
milliseconds the same work runs on a cold cache, and on a virtual machine
whose host runs other guests the cost of a wake-up can grow several-fold:
every message at 1,000 msgs/s (one each millisecond) pays it at every hop
(publisher, broker, followers, gateway, consumer). Run it beside a sitting of
bench/peers.py (which does) to tell a slow host from a slow change.

    .venv/bin/python bench/wakeup.py            # about 6 seconds
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import time

GAPS_MS = (0, 1, 4, 10)


def _echo(sock: socket.socket) -> None:
    while data := sock.recv(100):
        sock.sendall(data)


def round_trips(gap_ms: float, count: int) -> dict:
    """``count`` round trips, ``gap_ms`` apart: CPU per round trip in both processes, and its latency."""
    parent_end, child_end = socket.socketpair()
    pid = os.fork()
    if pid == 0:  # the child: echo until the parent closes its end
        parent_end.close()
        try:
            _echo(child_end)
        finally:
            os._exit(0)
    child_end.close()
    payload = b"x" * 100
    took: list[int] = []
    before = resource.getrusage(resource.RUSAGE_SELF)
    try:
        for _ in range(count):
            started = time.monotonic_ns()
            parent_end.sendall(payload)
            received = 0
            while received < len(payload):
                received += len(parent_end.recv(100))
            took.append(time.monotonic_ns() - started)
            if gap_ms:
                time.sleep(gap_ms / 1000)
        after = resource.getrusage(resource.RUSAGE_SELF)
    finally:
        parent_end.close()
        _, _, child = os.wait4(pid, 0)
    took.sort()
    parent_s = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    child_s = child.ru_utime + child.ru_stime
    return {"gap_ms": gap_ms, "round_trips": count,
            "parent_cpu_us": round(parent_s / count * 1e6, 1), "child_cpu_us": round(child_s / count * 1e6, 1),
            "p50_us": round(took[count // 2] / 1000), "p99_us": round(took[int(count * 0.99)] / 1000)}


def measure(seconds_per_gap: float = 1.5) -> list[dict]:
    """Each gap of GAPS_MS for about ``seconds_per_gap`` (at least 200 round trips)."""
    return [round_trips(gap, max(200, int(seconds_per_gap * 1000 / max(gap, 0.05)))) for gap in GAPS_MS]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds-per-gap", type=float, default=1.5, help="how long each gap is measured (default %(default)s)")
    args = parser.parse_args()
    print(json.dumps({"bench": "wakeup", "cpus": os.cpu_count(), "gaps": measure(args.seconds_per_gap)}, indent=2))


if __name__ == "__main__":
    main()
