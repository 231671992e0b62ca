"""Alerts in the console, in Chromium against a real deployment with a monitoring worker (issue 18): a member creates
a lag rule with the form (the preview shows the metric's value), sees it fire and sees the webhook delivery in the
rule's history; the group's page shows its lag over time after the consumer_lag job. Screenshots under
test-results/alerts/."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from playwright.sync_api import expect, sync_playwright

from tests.browser.test_console import _unlabelled_fields
from tests.browser.test_websocket_page import CHROMIUM, CHROMIUM_ARGS
from tests.harness.gateway import make_queue
from tests.harness.processes import REPO_ROOT
from tideway.native import GroupConsumer, Producer, TidewayClient

pytestmark = [pytest.mark.browser, pytest.mark.timeout(600)]
SCREENSHOTS = REPO_ROOT / "test-results" / "alerts"


@pytest.fixture(scope="module")
def plane(tmp_path_factory):
    from tests.harness.control_plane import running_control_plane
    from tests.harness.monitoring import kill_monitoring_worker, start_monitoring_worker

    home = tmp_path_factory.mktemp("alerts-console")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TIDEWAY_WEBHOOK_ALLOW_PRIVATE", "127.0.0.1/32")
        with running_control_plane(home, f"sqlite://{home}/control.sqlite3") as plane:
            worker = start_monitoring_worker(plane)
            try:
                yield plane
            finally:
                kill_monitoring_worker(worker)


def _receiver() -> tuple[str, list[str]]:
    got: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server's name
            got.append(self.rfile.read(int(self.headers["content-length"])).decode())
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}/hook", got


def test_a_member_creates_a_rule_in_the_console_sees_it_fire_and_sees_the_delivery(plane):
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    url, received = _receiver()
    _slug, key = plane.create_tenant(plan="team")
    name = make_queue(plane, key, partitions=1, mode="stream")
    username, password = plane.unique("alma"), "a long enough password"
    with plane.client(key) as api:
        assert plane.add_member(api, username, "admin", password).status_code == 201
        assert api.post("/api/v1/notification-channels/", json={"name": "hook", "kind": "webhook", "url": url}).status_code == 201

    async def behind() -> None:  # 50 messages, the group "workers" has read 5
        async with Producer(plane.deployment.bootstrap, api_key=key, acks="all") as producer:
            for i in range(50):
                await producer.send(name, b"m-%d" % i, partition=0)
            await producer.flush()
        async with TidewayClient(plane.deployment.bootstrap, api_key=key) as client:
            member = GroupConsumer(client, "workers", [name], auto_offset_reset="earliest", enable_auto_commit=False)
            await member.start()
            got = 0
            while got < 5:
                got += sum(len(r) for r in (await member.getmany(timeout_ms=1000, max_records=5 - got)).values())
            await member.commit()
            await member.stop()

    asyncio.run(behind())
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            problems: list[str] = []
            page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
            page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
            shots = [0]

            def check(label: str) -> None:
                assert _unlabelled_fields(page) == [], f"{label}: fields without a label"
                page.screenshot(path=str(SCREENSHOTS / f"{shots[0]:02d}-{label}.png"), full_page=True)
                shots[0] += 1

            page.goto(f"{plane.base_url}/console/signin")
            page.get_by_label("User name").fill(username)
            page.get_by_label("Password").fill(password)
            page.get_by_role("button", name="Sign in").click()
            page.get_by_role("link", name="Alerts").click()
            expect(page.get_by_role("heading", name="Alerts")).to_be_visible()
            page.get_by_label("Name", exact=True).fill("workers behind")
            page.get_by_label("Metric").select_option("lag")
            page.get_by_label("Queue", exact=True).select_option(name)
            page.get_by_label("Group (empty: every group)").fill("workers")
            page.get_by_label("Group (empty: every group)").dispatch_event("change")
            # The preview: the metric's value now, from the latest look (every second here).
            expect(page.locator("#metric-preview")).to_have_attribute("data-now", "45.0", timeout=30_000)
            page.get_by_label("Threshold", exact=True).fill("10")
            page.get_by_label("Recovery threshold (empty: the threshold)").fill("0")
            page.get_by_label("hook (webhook)").check()
            check("create-rule")
            page.get_by_role("button", name="Create rule").click()
            expect(page.get_by_role("heading", name="Alerts: workers behind")).to_be_visible()
            deadline = time.monotonic() + 60
            while page.locator("#rule-state").get_attribute("data-state") != "FIRING" and time.monotonic() < deadline:
                time.sleep(2)
                page.reload()
            expect(page.locator("#rule-state")).to_have_attribute("data-state", "FIRING")
            deadline = time.monotonic() + 30
            while not page.locator('[data-delivery="hook"][data-status="delivered"]').count() and time.monotonic() < deadline:
                time.sleep(1)
                page.reload()
            expect(page.locator('tr[data-event="firing"] [data-delivery="hook"]')).to_have_attribute("data-status", "delivered")
            check("rule-firing")
            assert any('"alert.firing"' in body for body in received)

            page.get_by_role("link", name="Alerts", exact=True).first.click()
            expect(page.locator('[data-rule-state="FIRING"]')).to_have_count(1)
            check("rules")

            # The group's lag over time once the consumer_lag job has run.
            done = subprocess.run([sys.executable, "manage.py", "spark_job", "consumer_lag", "--master", "local[2]"],
                                  cwd=REPO_ROOT, env=plane.env, capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, done.stderr[-2000:]
            page.goto(f"{plane.base_url}/console/queues/{name}/groups/workers?kind=stream")
            expect(page.locator("#lag-status")).to_have_attribute("data-status", "STOPPED")
            expect(page.locator("#lag-charts")).to_have_attribute("data-charts", "2")
            check("group-lag")
            assert problems == [], problems
        finally:
            browser.close()
