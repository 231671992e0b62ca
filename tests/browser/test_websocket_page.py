"""A web page subscribes over WebSocket in headless Chromium, shows pushed messages, and acks one from the page.

The page holds a short-lived token (POST /api/v1/tokens), never the API key,
and is served from another origin than the gateway, as a tenant's own site
would be.
"""

from __future__ import annotations

import http.server
import threading
import time

import pytest
from playwright.sync_api import expect, sync_playwright

from tests.harness.gateway import make_queue

pytestmark = pytest.mark.browser

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]

PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>Tideway live queue</title></head>
<body>
<h1>Queue <span id="queue"></span></h1>
<p id="status">connecting</p>
<ul id="messages"></ul>
<script>
const params = new URLSearchParams(location.search);
const queue = params.get("queue");
document.getElementById("queue").textContent = queue;
const socket = new WebSocket(`${params.get("gateway")}/ws/v1/queues/${queue}?token=${params.get("token")}`);
socket.onmessage = (event) => {
  const frame = JSON.parse(event.data);
  if (frame.type === "ready") {
    socket.send(JSON.stringify({type: "subscribe", group: "dashboard", prefetch: 10}));
  } else if (frame.type === "subscribed") {
    document.getElementById("status").textContent = "subscribed";
  } else if (frame.type === "messages") {
    for (const message of frame.messages) {
      const item = document.createElement("li");
      item.dataset.receipt = message.receipt;
      item.textContent = message.value + " ";
      const ack = document.createElement("button");
      ack.textContent = "Ack";
      ack.onclick = () => socket.send(JSON.stringify({type: "ack", id: message.receipt, receipts: [message.receipt]}));
      item.appendChild(ack);
      document.getElementById("messages").appendChild(item);
    }
  } else if (frame.type === "acked") {
    const item = document.querySelector(`li[data-receipt="${frame.id}"]`);
    item.classList.add("acked");
    item.querySelector("button").remove();
    item.append("(acked)");
  } else if (frame.type === "error") {
    document.getElementById("status").textContent = "error: " + frame.code;
  }
};
socket.onclose = () => { document.getElementById("status").textContent += " (closed)"; };
</script>
</body></html>
"""


@pytest.fixture
def page_server():
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = PAGE.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/live.html"
    server.shutdown()


def test_a_page_shows_pushed_messages_and_acks_one(gateway, page_server):
    _, key = gateway.create_tenant(plan="team")
    name = make_queue(gateway, key, partitions=1)
    with gateway.client(key) as api:
        token = api.post("/api/v1/tokens", json={"ttl_seconds": 120, "scopes": ["consume"], "queues": [name]}).json()["token"]
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                page = browser.new_page()
                gateway_ws = gateway.base_url.replace("http://", "ws://")
                page.goto(f"{page_server}?queue={name}&token={token}&gateway={gateway_ws}")
                expect(page.locator("#status")).to_have_text("subscribed", timeout=15_000)
                api.post(f"/api/v1/queues/{name}/messages", json={"messages": [{"value": "first order"}, {"value": "second order"}]})
                items = page.locator("#messages li")
                expect(items).to_have_count(2, timeout=15_000)
                expect(items.nth(0)).to_contain_text("first order")
                expect(items.nth(1)).to_contain_text("second order")
                items.nth(0).get_by_role("button", name="Ack").click()
                expect(items.nth(0)).to_contain_text("(acked)", timeout=10_000)
                expect(page.locator("li.acked")).to_have_count(1)
            finally:
                browser.close()  # the page's connection closes: its unacked message is released at once
        deadline = time.monotonic() + 15
        back = []
        while not back and time.monotonic() < deadline:
            back = api.post(f"/api/v1/queues/{name}/groups/dashboard/receive", json={"wait_seconds": 2}).json()["messages"]
        assert [(m["value"], m["delivery_count"]) for m in back] == [("second order", 2)]
