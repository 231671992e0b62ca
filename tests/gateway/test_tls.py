"""TLS when configured: `tideway serve --certfile --keyfile` serves HTTPS and WSS."""

from __future__ import annotations

import json
import ssl
import subprocess
import sys

import httpx
import websockets

from tests.harness.gateway import make_queue
from tests.harness.processes import REPO_ROOT, free_port, self_signed_certificate, wait_for_port


async def test_https_and_wss_with_a_configured_certificate(gateway, tenant, tmp_path):
    _, key = tenant
    name = make_queue(gateway, key, partitions=1)
    cert, private_key = self_signed_certificate(tmp_path)
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "tideway_server.cli.main", "serve", "--listen", f"127.0.0.1:{port}", "--no-migrate",
                               "--certfile", cert, "--keyfile", private_key],
                              cwd=REPO_ROOT, env=gateway.server_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, timeout_s=60, process=server)
        context = ssl.create_default_context(cafile=cert)
        async with httpx.AsyncClient(base_url=f"https://127.0.0.1:{port}", verify=context,
                                     headers={"Authorization": f"Bearer {key}"}) as api:
            answer = await api.post(f"/api/v1/queues/{name}/messages", json={"messages": [{"value": "over tls"}]})
            assert answer.status_code == 200, answer.text
        async with websockets.connect(f"wss://127.0.0.1:{port}/ws/v1/queues/{name}", ssl=context,
                                      additional_headers={"Authorization": f"Bearer {key}"}) as ws:
            await ws.send(json.dumps({"type": "subscribe", "group": "tls"}))
            while (frame := json.loads(await ws.recv()))["type"] != "messages":
                pass
            assert frame["messages"][0]["value"] == "over tls"
        # Plain HTTP to the TLS port is not served.
        try:
            plain = httpx.get(f"http://127.0.0.1:{port}/api/v1/queues/", timeout=5)
            assert plain.status_code >= 400
        except httpx.HTTPError:
            pass
    finally:
        server.terminate()
        server.wait(10)
