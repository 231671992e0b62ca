"""The client distribution installs alone (issue 41): a client application wants a few MB and no server.

Builds the client wheel from ./tideway, installs it alone in a fresh virtualenv (nothing of the repository on
its path), prints its size and what it brought, and runs a program there against a real deployment: publish,
receive and ack over REST, a subscription over WebSocket, produce and consume over the native protocol, with a
tenant's key.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from tests.harness.gateway import make_queue
from tests.harness.processes import REPO_ROOT

pytestmark = pytest.mark.timeout(600)

# What the client may bring: its own libraries and theirs (httpx's), nothing of a server.
ALLOWED = {"tideway", "msgspec", "crc32c", "httpx", "websockets", "anyio", "certifi", "h11",
           "httpcore", "idna", "sniffio", "typing-extensions", "typing_extensions", "pip", "setuptools"}
SERVER_LIBRARIES = {"django", "celery", "pyspark", "redis", "uvicorn", "channels", "psycopg", "prometheus-client"}
WHEEL_BYTES_MAX = 1 << 20
INSTALLED_BYTES_MAX = 15 << 20  # with its dependencies, pip and setuptools aside

PROGRAM = r'''
import asyncio, json, sys
import tideway
from tideway.native import Consumer, Producer, TidewayClient

base_url, key, bootstrap, name = sys.argv[1:5]
out = {"tideway": tideway.__file__}

with tideway.Client(base_url, key) as client:  # REST
    queue = client.queue(name)
    queue.publish(["rest-1", "rest-2"])
    got = []
    while len(got) < 2:
        got += queue.receive("wheel-rest", max_messages=10, wait_seconds=2)
    for message in got:
        message.ack()
    out["rest"] = sorted(m.text for m in got)


async def websocket_and_native():
    async with tideway.AsyncClient(base_url, key) as client:  # WebSocket
        queue = client.queue(name)
        seen = []

        async def consume():
            async for message in queue.subscribe("wheel-ws", prefetch=5):
                seen.append(message.text)
                await message.ack()
                if len(seen) == 2:
                    return

        await asyncio.wait_for(consume(), 30)
        out["websocket"] = sorted(seen)
    async with TidewayClient(bootstrap, api_key=key) as client:  # native
        async with Producer(client, acks="all") as producer:
            for i in range(3):
                await producer.send_and_wait(name, b"native-%d" % i, partition=0)
        consumer = Consumer(client)
        await consumer.start()
        await consumer.assign([(name, 0)], start="earliest")
        values = []
        while not any(v.startswith(b"native-2") for v in values):
            for records in (await consumer.getmany(timeout_ms=2000)).values():
                values += [r.value for r in records]
        await consumer.stop()
        out["native"] = sorted(v.decode() for v in values if v.startswith(b"native-"))

asyncio.run(websocket_and_native())
print(json.dumps(out))
'''


def test_the_client_wheel_installs_alone_and_speaks_rest_websocket_and_native(gateway, tenant, tmp_path):
    _, key = tenant
    name = make_queue(gateway, key, partitions=1)

    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(REPO_ROOT / "tideway")],
                   check=True, cwd=tmp_path)
    [wheel] = dist.glob("tideway-*.whl")
    environment = tmp_path / "client-venv"
    venv.create(environment, with_pip=True)
    python = environment / "bin" / "python"
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "DJANGO_SETTINGS_MODULE")}
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(wheel)],
                   check=True, cwd=tmp_path, env=clean)

    listed = json.loads(subprocess.run([str(python), "-m", "pip", "list", "--format", "json", "--disable-pip-version-check"],
                                       check=True, capture_output=True, text=True, cwd=tmp_path, env=clean).stdout)
    installed = {p["name"].lower(): p["version"] for p in listed}
    site = next((environment / "lib").glob("python3*/site-packages"))
    size = sum(f.stat().st_size for f in site.rglob("*") if f.is_file() and not _tooling(f, site))
    print(f"client wheel: {wheel.name}, {wheel.stat().st_size:,} bytes; installed with its dependencies: "
          f"{size / 1e6:.1f} MB; {', '.join(f'{n} {v}' for n, v in sorted(installed.items()))}")
    assert wheel.stat().st_size < WHEEL_BYTES_MAX
    assert size < INSTALLED_BYTES_MAX
    assert set(installed) <= ALLOWED, f"the client brought {sorted(set(installed) - ALLOWED)}"
    assert not set(installed) & SERVER_LIBRARIES
    top_level = {p.name for p in site.iterdir() if p.is_dir() and not p.name.endswith((".dist-info", "__pycache__"))}
    assert not top_level & {"brokers", "gateway", "registry", "alerts", "lag", "topics", "billing", "webui",
                            "controlplane", "tenants", "clusters", "spark_analytics", "tideway_cli",
                            "tideway_server"}, top_level

    ran = subprocess.run([str(python), "-c", PROGRAM, gateway.base_url, key, gateway.deployment.bootstrap, name],
                         capture_output=True, text=True, cwd=tmp_path, env=clean, timeout=300)
    assert ran.returncode == 0, ran.stderr[-3000:]
    out = json.loads(ran.stdout.strip().splitlines()[-1])
    assert Path(out["tideway"]).is_relative_to(environment), out["tideway"]  # the wheel's, not the repository's
    assert out["rest"] == ["rest-1", "rest-2"]
    assert out["websocket"] == ["rest-1", "rest-2"]  # another group: it gets the queue's messages again
    assert out["native"] == ["native-0", "native-1", "native-2"]


def _tooling(path: Path, site: Path) -> bool:
    """pip and setuptools come with every virtualenv: not the client's weight."""
    top = path.relative_to(site).parts[0].lower()
    return top.startswith(("pip", "setuptools", "_distutils_hack", "distutils-precedence", "pkg_resources"))
