"""A transparent TCP proxy that slows a host's outgoing connections: delay, jitter and loss without ``tc netem``
(whose kernel module these machines lack; tests/harness/hosts.py installs it with ``Host.slow_outgoing``).

Runs in the host's network namespace. nftables redirects the host's new connections to chosen ports of other
hosts here (SO_ORIGINAL_DST says where they were going); the proxy connects there itself (its own connections
carry a firewall mark the redirect skips) and forwards both directions, each chunk held back by a delay drawn
from ``delay ± jitter`` ms. Order is kept: a chunk never leaves before the one read before it. A lost packet is
modelled as TCP experiences it: the chunk arrives after a retransmission timeout (``RETRANSMIT_MS`` more), not
never. The link's figures come from a control file (``delay_ms jitter_ms loss``, e.g. ``200 100 0.05``), read
every 0.2 s, so a test turns the nemesis on and off without reconnecting anything.

    python -m tests.harness.link_proxy --listen-port 15001 --control FILE
"""

from __future__ import annotations

import argparse
import asyncio
import random
import socket
import struct
from pathlib import Path

SO_ORIGINAL_DST = 80  # linux/netfilter_ipv4.h
MARK = 0x7477  # the proxy's own connections: never redirected (tests/harness/hosts.py's LINK_PROXY_MARK)
RETRANSMIT_MS = 200  # TCP's minimum retransmission timeout on Linux
QUEUED_MAX = 8 << 20  # bytes held per direction before reading pauses


class Link:
    def __init__(self, control: Path) -> None:
        self.control = control
        self.delay_s = self.jitter_s = self.loss = 0.0

    async def watch(self) -> None:
        while True:
            try:
                delay, jitter, loss = self.control.read_text().split()
                self.delay_s, self.jitter_s, self.loss = float(delay) / 1000, float(jitter) / 1000, float(loss)
            except (OSError, ValueError):
                pass
            await asyncio.sleep(0.2)

    def hold_s(self) -> float:
        held = max(0.0, self.delay_s + random.uniform(-self.jitter_s, self.jitter_s))
        if self.loss and random.random() < self.loss:
            held += RETRANSMIT_MS / 1000
        return held


async def pump(link: Link, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Forward ``reader`` to ``writer``, each chunk held as the link says, in order."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue()
    queued = 0
    room = asyncio.Event()
    room.set()

    async def deliver() -> None:
        nonlocal queued
        while True:
            at, data = await queue.get()
            wait = at - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            if data is None:
                break
            writer.write(data)
            queued -= len(data)
            if queued < QUEUED_MAX:
                room.set()
            await writer.drain()
        writer.close()

    delivering = asyncio.ensure_future(deliver())
    last = loop.time()
    try:
        while data := await reader.read(1 << 16):
            last = max(last, loop.time() + link.hold_s())
            queue.put_nowait((last, data))
            queued += len(data)
            if queued >= QUEUED_MAX:
                room.clear()
                await room.wait()
    except ConnectionError:
        pass
    queue.put_nowait((last, None))
    try:
        await delivering
    except ConnectionError:
        pass


async def serve(port: int, link: Link) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        original = writer.get_extra_info("socket").getsockopt(socket.SOL_IP, SO_ORIGINAL_DST, 16)
        target_port, packed = struct.unpack_from("!2xH4s", original)
        upstream = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        upstream.setsockopt(socket.SOL_SOCKET, socket.SO_MARK, MARK)
        upstream.setblocking(False)
        try:
            await asyncio.get_running_loop().sock_connect(upstream, (socket.inet_ntoa(packed), target_port))
        except OSError:
            upstream.close()
            writer.close()
            return
        up_reader, up_writer = await asyncio.open_connection(sock=upstream)
        await asyncio.gather(pump(link, reader, up_writer), pump(link, up_reader, writer))

    server = await asyncio.start_server(handle, "0.0.0.0", port)
    print(f"link proxy on port {port}", flush=True)
    asyncio.ensure_future(link.watch())
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--listen-port", type=int, required=True)
    parser.add_argument("--control", type=Path, required=True, help="file: delay_ms jitter_ms loss")
    args = parser.parse_args()
    asyncio.run(serve(args.listen_port, Link(args.control)))


if __name__ == "__main__":
    main()
