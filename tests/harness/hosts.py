"""Hosts of their own on one machine, for network faults (issue 45): a network namespace per host, joined by a
bridge, and links between hosts cut or healed with nftables.

Every process of a test so far shared 127.0.0.1, so no test could cut one process off from some peers but not
others. Here each host (the controller, each broker, each gateway, Redis) has a namespace of its own with one
interface and an address on a private /24; the bridge's own address is the test process's, i.e. the clients'
side of the network. A cut drops packets at the receiving host's input (silently, as a real partition: a sender
sees timeouts, never an error), so one-way partitions are cuts of one direction only.

    with Network() as net:
        controller, b1 = net.add_host("controller"), net.add_host("b1")
        process = b1.popen([sys.executable, "-m", ...])     # runs in b1's namespace
        net.cut(b1, controller)                              # both ways
        net.cut_one_way(b1, controller)                      # b1's packets do not reach the controller
        net.isolate(b1, keep=[CLIENTS])                      # from every host but the clients' side
        net.heal()

Cleaning up: ``close()`` kills what the hosts run and deletes namespaces and bridge; a network left behind by a
test run that died (SIGKILL, a power cut) is swept by the next ``Network()`` (names carry the pid of the run that
made them). Needs root, ``ip`` (iproute2) and ``nft`` (nftables): ``available()`` says whether this machine has
them. ``tc netem`` is not used (its kernel module is missing on these machines): delay and loss between hosts go
through tests/harness/link_proxy.py (``Host.slow_outgoing``).
"""

from __future__ import annotations

import functools
import ipaddress
import itertools
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

PREFIX = "tw"  # every namespace, bridge and interface this module makes starts with it (and the pid)
TABLE = "tideway_nemesis"  # the nftables table in each host's namespace
PROXY_TABLE = "tideway_links"  # its table redirecting outgoing connections to a link proxy (slow_outgoing)
LINK_PROXY_MARK = 0x7477  # tests/harness/link_proxy.py's own connections carry it
_sequence = itertools.count(1)


@functools.cache
def available() -> str | None:
    """None when namespaces can be made here; else why not (a test skips with it). Tries once: a container
    without the capabilities refuses ``ip netns add`` even to root."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool, package in (("ip", "iproute2"), ("nft", "nftables")):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install {package}; infra/setup.sh does)"
    probe = f"{PREFIX}{os.getpid()}-0-probe"
    made = _run("ip", "netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"this machine refuses network namespaces: {made.stderr.strip()}"
    tried = _run("ip", "netns", "exec", probe, "nft", "list", "tables", check=False)
    _run("ip", "netns", "del", probe, check=False)
    if tried.returncode != 0:
        return f"nftables does not work in a network namespace here: {tried.stderr.strip()}"
    return None


def _run(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {result.stderr.strip() or result.stdout.strip()}")
    return result


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_stale() -> list[str]:
    """Delete namespaces and bridges left by test runs whose process is gone (killing what still runs in them);
    returns their names."""
    swept = []
    namespaces = _run("ip", "netns", "list", check=False).stdout.split("\n")
    for line in namespaces:
        name = line.split(" ")[0]
        found = re.fullmatch(rf"{PREFIX}(\d+)-\d+-.+", name)
        if found and not _alive(int(found.group(1))):
            for pid in _run("ip", "netns", "pids", name, check=False).stdout.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            _run("ip", "netns", "del", name, check=False)
            swept.append(name)
    for line in _run("nft", "list", "tables", check=False).stdout.split("\n"):
        found = re.fullmatch(rf"table inet ({TABLE}_{PREFIX}(\d+)_\d+)", line.strip())
        if found and not _alive(int(found.group(2))):
            _run("nft", "delete", "table", "inet", found.group(1), check=False)
            swept.append(found.group(1))
    for line in _run("ip", "-o", "link", "show", "type", "veth", check=False).stdout.split("\n"):
        found = re.match(rf"\d+: ({PREFIX}v(\d+)x\d+)[:@]", line)
        if found and not _alive(int(found.group(2))):
            _run("ip", "link", "del", found.group(1), check=False)
            swept.append(found.group(1))
    for line in _run("ip", "-o", "link", "show", "type", "bridge", check=False).stdout.split("\n"):
        found = re.match(rf"\d+: ({PREFIX}b(\d+)x\d+)[:@]", line)
        if found and not _alive(int(found.group(2))):
            _run("ip", "link", "del", found.group(1), check=False)
            swept.append(found.group(1))
    return swept


def _free_subnet() -> ipaddress.IPv4Network:
    """A /24 in 10.200.0.0/13 that no interface of this machine is on."""
    used = _run("ip", "-4", "-o", "addr", "show", check=False).stdout
    start = (os.getpid() * 7 + next(_sequence) * 131) % 2048
    for step in range(2048):
        index = (start + step) % 2048
        subnet = ipaddress.ip_network(f"10.{200 + index // 256}.{index % 256}.0/24")
        if f" 10.{200 + index // 256}.{index % 256}." not in used:
            return subnet
    raise RuntimeError("no free /24 in 10.200.0.0/13")


class Host:
    """One namespace: a name, an address, and the processes it runs."""

    def __init__(self, network: Network, name: str, namespace: str, address: str) -> None:
        self.network = network
        self.name = name
        self.namespace = namespace
        self.address = address
        self.veth = ""  # its end of the link to the bridge, in the root namespace
        self.processes: list[subprocess.Popen] = []

    def __repr__(self) -> str:
        return f"Host({self.name} {self.address})"

    def command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run in this host's namespace (``ip netns exec`` execs it: the pid is the program's own)."""
        return ["ip", "netns", "exec", self.namespace, *argv]

    def popen(self, argv: Sequence[str], **kwargs) -> subprocess.Popen:
        process = subprocess.Popen(self.command(argv), **kwargs)
        self.processes.append(process)
        return process

    def run(self, argv: Sequence[str], **kwargs) -> subprocess.CompletedProcess:
        return subprocess.run(self.command(argv), **kwargs)

    def nft(self, *rule: str) -> None:
        _run(*self.command(["nft", *rule]))

    def slow_outgoing(self, ports: Iterable[int], control: Path, proxy_port: int = 15001) -> subprocess.Popen:
        """Send this host's new connections to ``ports`` of the network's hosts through a link proxy
        (tests/harness/link_proxy.py) whose delay, jitter and loss ``control`` sets ("0 0 0": none)."""
        import sys

        if not control.exists():
            control.write_text("0 0 0\n")
        proxy = self.popen([sys.executable, "-m", "tests.harness.link_proxy", "--listen-port", str(proxy_port),
                            "--control", str(control)], cwd=Path(__file__).resolve().parents[2],
                           stdout=subprocess.PIPE, text=True)
        if not proxy.stdout.readline().startswith("link proxy on port"):
            raise RuntimeError(f"the link proxy of {self.name} did not start")
        self.nft("add", "table", "ip", PROXY_TABLE)
        self.nft("add", "chain", "ip", PROXY_TABLE, "out", "{ type nat hook output priority -100; }")
        for port in ports:
            self.nft("add", "rule", "ip", PROXY_TABLE, "out", "ip", "daddr", str(self.network.subnet), "tcp", "dport",
                     str(port), "meta", "mark", "!=", hex(LINK_PROXY_MARK), "redirect", "to", f":{proxy_port}")
        return proxy


class Clients:
    """The clients' side of the network: the test process itself, on the bridge's address (root namespace)."""

    name = "clients"

    def __init__(self, address: str) -> None:
        self.address = address

    def __repr__(self) -> str:
        return f"Clients({self.address})"


class Network:
    """A bridge and the hosts on it; see the module's doc."""

    def __init__(self) -> None:
        reason = available()
        if reason is not None:
            raise RuntimeError(reason)
        sweep_stale()
        self.tag = f"{PREFIX}{os.getpid()}-{next(_sequence)}"
        self.bridge = f"{PREFIX}b{os.getpid()}x{next(_sequence)}"
        if len(self.bridge) > 15:
            raise RuntimeError(f"interface name {self.bridge!r} too long")
        self.subnet = _free_subnet()
        addresses = self.subnet.hosts()
        self.clients = Clients(str(next(addresses)))
        self._addresses = addresses
        self.hosts: dict[str, Host] = {}
        self._cuts: set[tuple[str, str]] = set()  # (from address, to address) pairs dropped
        self.root_table = f"{TABLE}_{self.tag}".replace("-", "_")
        _run("ip", "link", "add", self.bridge, "type", "bridge")
        try:
            _run("ip", "addr", "add", f"{self.clients.address}/{self.subnet.prefixlen}", "dev", self.bridge)
            _run("ip", "link", "set", self.bridge, "up")
            _run("nft", "add", "table", "inet", self.root_table)
            _run("nft", "add", "chain", "inet", self.root_table, "input",
                 "{ type filter hook input priority 0; policy accept; }")
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> Network:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def add_host(self, name: str) -> Host:
        if name in self.hosts or not re.fullmatch(r"[a-z0-9]{1,12}", name):
            raise ValueError(f"host name {name!r}: new, 1-12 of [a-z0-9]")
        namespace = f"{self.tag}-{name}"
        index = len(self.hosts) + 1
        outside = f"{PREFIX}v{os.getpid()}x{index}"[:15]
        address = str(next(self._addresses))
        # An earlier network of this process may have left its veth of this name: a namespace whose sockets still
        # close (TIME_WAIT) outlives its name, and keeps its devices, for a minute or more.
        _run("ip", "link", "del", outside, check=False)
        _run("ip", "netns", "add", namespace)
        host = Host(self, name, namespace, address)
        host.veth = outside
        self.hosts[name] = host
        _run("ip", "link", "add", outside, "type", "veth", "peer", "name", "eth0", "netns", namespace)
        _run("ip", "link", "set", outside, "master", self.bridge, "up")
        _run("ip", "-n", namespace, "addr", "add", f"{address}/{self.subnet.prefixlen}", "dev", "eth0")
        _run("ip", "-n", namespace, "link", "set", "eth0", "up")
        _run("ip", "-n", namespace, "link", "set", "lo", "up")
        host.nft("add", "table", "inet", TABLE)
        host.nft("add", "chain", "inet", TABLE, "input", "{ type filter hook input priority 0; policy accept; }")
        return host

    # -- faults ------------------------------------------------------------------------------------------

    def cut_one_way(self, source: Host | Clients, destination: Host | Clients) -> None:
        """Packets from ``source`` no longer reach ``destination`` (dropped at its input; the other way works)."""
        key = (source.address, destination.address)
        if key in self._cuts:
            return
        if isinstance(destination, Host):
            destination.nft("add", "rule", "inet", TABLE, "input", "ip", "saddr", source.address, "drop")
        else:  # the clients' side: a table of this network's own in the root namespace, on the bridge only
            _run("nft", "add", "rule", "inet", self.root_table, "input", "iifname", self.bridge, "ip", "saddr",
                 source.address, "drop")
        self._cuts.add(key)

    def cut(self, a: Host | Clients, b: Host | Clients) -> None:
        """No packet between ``a`` and ``b`` either way."""
        self.cut_one_way(a, b)
        self.cut_one_way(b, a)

    def isolate(self, host: Host, *, keep: Iterable[Host | Clients] = ()) -> None:
        """Cut ``host`` off from every other host (and the clients' side) except those in ``keep``."""
        kept = {peer.address for peer in keep}
        for peer in [*self.hosts.values(), self.clients]:
            if peer is not host and peer.address not in kept:
                self.cut(host, peer)

    def split(self, side: Iterable[Host], other: Iterable[Host]) -> None:
        """No packet between any host of ``side`` and any of ``other`` (a minority/majority split)."""
        for a in side:
            for b in other:
                self.cut(a, b)

    def heal(self) -> None:
        """Every link works again."""
        for host in self.hosts.values():
            host.nft("flush", "chain", "inet", TABLE, "input")
        _run("nft", "flush", "chain", "inet", self.root_table, "input")
        self._cuts.clear()

    def cuts(self) -> set[tuple[str, str]]:
        """(from, to) host names of the links cut now."""
        names = {host.address: host.name for host in self.hosts.values()} | {self.clients.address: "clients"}
        return {(names[a], names[b]) for a, b in self._cuts}

    # -- cleaning up -------------------------------------------------------------------------------------

    def close(self) -> None:
        for host in self.hosts.values():
            for process in host.processes:
                if process.poll() is None:
                    try:
                        process.send_signal(signal.SIGCONT)  # (a stopped process dies of SIGKILL too; be sure)
                        process.kill()
                        process.wait(10)
                    except (ProcessLookupError, subprocess.TimeoutExpired):
                        pass
            for pid in _run("ip", "netns", "pids", host.namespace, check=False).stdout.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
        deadline = time.monotonic() + 10
        for host in self.hosts.values():
            while _run("ip", "netns", "pids", host.namespace, check=False).stdout.strip() and time.monotonic() < deadline:
                time.sleep(0.05)
            _run("ip", "netns", "del", host.namespace, check=False)
            # Deleting one end of the pair deletes both, now: the namespace itself may linger while its sockets close.
            _run("ip", "link", "del", host.veth, check=False)
        self.hosts.clear()
        _run("ip", "link", "del", self.bridge, check=False)
        _run("nft", "delete", "table", "inet", self.root_table, check=False)
