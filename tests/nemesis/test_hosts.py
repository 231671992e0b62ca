"""The hosts harness itself (tests/harness/hosts.py): hosts reach each other and the clients' side, a cut
silences exactly the links it names, healing restores them, and nothing is left behind."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest

from tests.harness import hosts

pytestmark = pytest.mark.skipif(hosts.available() is not None, reason=str(hosts.available()))

SERVE = """
import socket, sys
server = socket.create_server((sys.argv[1], 7000))
print("listening", flush=True)
while True:
    connection, _ = server.accept()
    connection.sendall(b"hello")
    connection.close()
"""

CONNECT = """
import socket, sys
try:
    with socket.create_connection((sys.argv[1], 7000), timeout=1) as s:
        print(s.recv(5).decode())
except OSError as exc:
    print(type(exc).__name__)
"""


def reaches(source, address: str) -> str:
    """What a connection from ``source`` (a host, or None: the clients' side) to ``address`` gets."""
    if source is None:
        try:
            with socket.create_connection((address, 7000), timeout=1) as s:
                return s.recv(5).decode()
        except OSError as exc:
            return type(exc).__name__
    return source.run([sys.executable, "-c", CONNECT, address], capture_output=True, text=True,
                      timeout=20).stdout.strip()


def test_hosts_reach_each_other_until_cut_and_leave_nothing_behind():
    with hosts.Network() as net:
        a, b, c = net.add_host("a"), net.add_host("b"), net.add_host("c")
        assert len({a.address, b.address, c.address, net.clients.address}) == 4
        server = a.popen([sys.executable, "-c", SERVE, a.address], stdout=subprocess.PIPE, text=True)
        assert server.stdout.readline().strip() == "listening"
        assert reaches(b, a.address) == "hello" and reaches(c, a.address) == "hello"
        assert reaches(None, a.address) == "hello"

        net.cut(a, b)  # a and b: silence (a timeout, as on a real network: never a refusal)
        assert reaches(b, a.address) == "TimeoutError"
        assert reaches(c, a.address) == "hello" and reaches(None, a.address) == "hello"
        assert net.cuts() == {("a", "b"), ("b", "a")}

        net.heal()
        net.isolate(a, keep=[net.clients])  # from every host, not from the clients
        assert reaches(b, a.address) == "TimeoutError" and reaches(c, a.address) == "TimeoutError"
        assert reaches(None, a.address) == "hello"

        net.heal()
        net.cut(a, net.clients)
        assert reaches(None, a.address) == "TimeoutError" and reaches(b, a.address) == "hello"

        net.heal()
        net.cut_one_way(b, a)  # b's packets do not reach a: not even a connection from b (its SYN is lost)
        assert reaches(b, a.address) == "TimeoutError" and reaches(c, a.address) == "hello"
        net.heal()
        assert reaches(b, a.address) == "hello"
        namespaces = [h.namespace for h in net.hosts.values()]
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not any(ns in listed for ns in namespaces), listed
    assert net.bridge not in subprocess.run(["ip", "link", "show"], capture_output=True, text=True).stdout
    assert net.root_table not in subprocess.run(["nft", "list", "tables"], capture_output=True, text=True).stdout
    assert server.poll() is not None


def test_a_network_left_by_a_dead_test_run_is_swept():
    dead = subprocess.Popen(["true"])
    dead.wait()
    namespace = f"{hosts.PREFIX}{dead.pid}-1-orphan"
    subprocess.run(["ip", "netns", "add", namespace], check=True)
    sleeper = subprocess.Popen(["ip", "netns", "exec", namespace, "sleep", "600"])
    try:
        assert namespace in hosts.sweep_stale()
        assert sleeper.wait(10) == -9
        assert namespace not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    finally:
        sleeper.kill()
        subprocess.run(["ip", "netns", "del", namespace], capture_output=True)


ECHO = """
import socket, sys, threading
server = socket.create_server((sys.argv[1], 7001))
print("listening", flush=True)
def echo(connection):
    while data := connection.recv(65536):
        connection.sendall(data)
while True:
    threading.Thread(target=echo, args=(server.accept()[0],), daemon=True).start()
"""

ROUND_TRIPS = """
import socket, sys, time
with socket.create_connection((sys.argv[1], 7001), timeout=10) as s:
    times = []
    for i in range(int(sys.argv[2])):
        started = time.monotonic()
        s.sendall(b"%06d" % i)
        got = b""
        while len(got) < 6:
            got += s.recv(6 - len(got))
        assert got == b"%06d" % i, got
        times.append(time.monotonic() - started)
    print(" ".join("%.4f" % t for t in times))
"""


def test_a_slowed_link_delays_and_loses_in_order(tmp_path):
    """Through the link proxy: round trips take the delay both ways (± jitter), a lost chunk a retransmission
    timeout more, bytes arrive in order; with the control at zero, as fast as a direct link."""
    with hosts.Network() as net:
        a, b = net.add_host("a"), net.add_host("b")
        server = b.popen([sys.executable, "-c", ECHO, b.address], stdout=subprocess.PIPE, text=True)
        assert server.stdout.readline().strip() == "listening"
        control = tmp_path / "link"
        a.slow_outgoing([7001], control)

        def round_trips(count: int) -> list[float]:
            out = a.run([sys.executable, "-c", ROUND_TRIPS, b.address, str(count)], capture_output=True, text=True,
                        timeout=120)
            assert out.returncode == 0, out.stderr
            return [float(t) for t in out.stdout.split()]

        direct = round_trips(20)
        control.write_text("100 20 0\n")
        time.sleep(0.5)
        slow = round_trips(10)
        assert all(t >= 0.16 for t in slow), slow  # at least 100 - 20 ms each way
        assert max(direct) < min(slow), (direct, slow)  # and the proxy at zero adds no such delay
        control.write_text("10 0 0.2\n")
        time.sleep(0.5)
        lossy = round_trips(40)
        assert all(t >= 0.02 for t in lossy), lossy
        assert sum(t >= 0.2 for t in lossy) >= 3, lossy  # about 40 % of round trips lose one of their 2 chunks
