"""Alert rules end to end (issue 18): a group stops consuming, its lag in seconds crosses a rule's threshold, the
rule fires; the monitoring worker is SIGKILLed and restarted; the group catches up and the rule resolves.

Another tenant, created first, has a group lagging on every partition of a 6-partition queue, so every broker
leads lagging partitions of that tenant that a look asks about before the rule's (issue 40: only the first
partition asked of each broker got a time, and the rule's group read 0 seconds behind and never fired).

A real HTTP receiver checks every webhook's Standard Webhooks signature and counts what arrives; a real SMTP
server (aiosmtpd) receives the e-mail; a receiver that fails twice shows the retries in the API. Looks every
2 s (TIDEWAY_LAG_SAMPLE_S), rules every 10 s (the default).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.harness.control_plane import running_control_plane
from tests.harness.gateway import make_queue
from tests.harness.monitoring import kill_monitoring_worker, start_monitoring_worker
from tests.harness.processes import free_port
from tests.harness.waiting import wait_until
from tideway.native import GroupConsumer, Producer, TidewayClient
from tideway.native.group import CoordinatorLink, commit_offsets

pytestmark = pytest.mark.timeout(600)

THRESHOLD_S = 20
RECOVERY_S = 5
LIMIT_S = 15  # fires (and resolves) within this long of the condition holding


class Receiver:
    """Webhook receivers on 127.0.0.1: /hook answers 204; /fail answers 500 twice to each message, then 204."""

    def __init__(self) -> None:
        self.secrets: dict[str, bytes] = {}  # per path: each channel has its own
        self.received: list[dict] = []  # {"path", "id", "type", "valid", "at"}
        self.failed: dict[str, int] = {}  # /fail: 500s given per message id
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["content-length"]))
                message_id, stamp = self.headers["webhook-id"], self.headers["webhook-timestamp"]
                expected = base64.b64encode(hmac.new(receiver.secrets[self.path], f"{message_id}.{stamp}.".encode() + body,
                                                     hashlib.sha256).digest()).decode()
                signatures = [s.split(",", 1)[1] for s in self.headers["webhook-signature"].split() if s.startswith("v1,")]
                receiver.received.append({"path": self.path, "id": message_id, "type": json.loads(body)["type"],
                                          "valid": expected in signatures and abs(time.time() - int(stamp)) < 300,
                                          "at": time.time()})
                if self.path == "/fail" and receiver.failed.get(message_id, 0) < 2:
                    receiver.failed[message_id] = receiver.failed.get(message_id, 0) + 1
                    self.send_response(500)
                else:
                    self.send_response(204)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def of(self, path: str, kind: str) -> list[dict]:
        return [r for r in self.received if r["path"] == path and r["type"] == f"alert.{kind}"]


class Mailbox:
    def __init__(self) -> None:
        from aiosmtpd.controller import Controller

        self.messages: list[tuple[str, str]] = []  # (to, subject)
        mailbox = self

        class Handler:
            async def handle_DATA(self, server, session, envelope):  # noqa: N802 - aiosmtpd's name
                subject = next((line[9:] for line in envelope.content.decode(errors="replace").splitlines()
                                if line.startswith("Subject: ")), "")
                mailbox.messages += [(to, subject) for to in envelope.rcpt_tos]
                return "250 OK"

        self.port = free_port()
        self.controller = Controller(Handler(), hostname="127.0.0.1", port=self.port)
        self.controller.start()


@pytest.fixture(scope="module")
def alerting(tmp_path_factory):
    mailbox = Mailbox()
    saved = {k: os.environ.get(k) for k in ("TIDEWAY_WEBHOOK_ALLOW_PRIVATE", "TIDEWAY_EMAIL_HOST", "TIDEWAY_EMAIL_PORT",
                                             "TIDEWAY_LAG_SAMPLE_S")}
    os.environ.update({"TIDEWAY_WEBHOOK_ALLOW_PRIVATE": "127.0.0.1/32", "TIDEWAY_EMAIL_HOST": "127.0.0.1",
                       "TIDEWAY_EMAIL_PORT": str(mailbox.port), "TIDEWAY_LAG_SAMPLE_S": "2"})
    home = tmp_path_factory.mktemp("alerts")
    try:
        with running_control_plane(home, f"sqlite://{home}/control.sqlite3") as plane:
            plane.monitoring = start_monitoring_worker(plane)
            plane.mailbox = mailbox
            try:
                yield plane
            finally:
                kill_monitoring_worker(plane.monitoring)
    finally:
        mailbox.controller.stop()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _other_group_lagging_everywhere(plane) -> None:
    """A tenant's group 30 records behind on each of 6 partitions (two led by each broker)."""
    _slug, key = plane.create_tenant(plan="team")
    name = make_queue(plane, key, partitions=6, mode="stream")

    async def lag() -> None:
        async with Producer(plane.deployment.bootstrap, api_key=key, acks="all") as producer:
            for partition in range(6):
                for i in range(31):
                    await producer.send(name, b"other-%d" % i, partition=partition)
            await producer.flush()
        async with TidewayClient(plane.deployment.bootstrap, api_key=key) as client:
            await commit_offsets(CoordinatorLink(client, "laggards"), {(name, p): 1 for p in range(6)})

    asyncio.run(lag())


def test_a_lag_rule_fires_and_resolves_once_through_a_worker_kill_with_signed_webhooks_email_and_retries(alerting):
    plane = alerting
    receiver = Receiver()
    _other_group_lagging_everywhere(plane)
    _slug, key = plane.create_tenant(plan="team")
    name = make_queue(plane, key, partitions=1, mode="stream")
    with plane.client(key) as api:
        hook = api.post("/api/v1/notification-channels/", json={"name": "hook", "kind": "webhook", "url": receiver.url + "/hook"})
        assert hook.status_code == 201, hook.text
        receiver.secrets["/hook"] = base64.b64decode(hook.json()["secret"].removeprefix("whsec_"))
        fail = api.post("/api/v1/notification-channels/", json={"name": "flaky", "kind": "webhook", "url": receiver.url + "/fail"})
        assert fail.status_code == 201, fail.text
        receiver.secrets["/fail"] = base64.b64decode(fail.json()["secret"].removeprefix("whsec_"))
        mail = api.post("/api/v1/notification-channels/", json={"name": "ops", "kind": "email", "email": "ops@example.com"})
        assert mail.status_code == 201, mail.text
        assert "secret" not in api.get(f"/api/v1/notification-channels/{hook.json()['id']}").json()  # shown once
        rule = api.post("/api/v1/alerts/", json={
            "name": "workers behind", "metric": "lag_seconds", "queue": name, "group": "workers", "comparator": ">",
            "threshold": THRESHOLD_S, "recovery_threshold": RECOVERY_S, "pending": {"m": 1, "n": 1},
            "channels": ["hook", "flaky", "ops"]})
        assert rule.status_code == 201, rule.text
        rule_id = rule.json()["id"]

    sent_ms: list[float] = []

    async def produce_and_read_ten() -> None:
        async with Producer(plane.deployment.bootstrap, api_key=key, acks="all") as producer:
            for i in range(100):
                sent_ms.append(time.time() * 1000)
                await (await producer.send(name, b"job-%d" % i, partition=0))
        async with TidewayClient(plane.deployment.bootstrap, api_key=key) as client:
            member = GroupConsumer(client, "workers", [name], auto_offset_reset="earliest", enable_auto_commit=False)
            await member.start()
            got = 0
            while got < 10:
                got += sum(len(r) for r in (await member.getmany(timeout_ms=1000, max_records=10 - got)).values())
            await member.commit()
            await member.stop()

    asyncio.run(produce_and_read_ten())
    crossed_at = sent_ms[10] / 1000 + THRESHOLD_S  # the first record not consumed is this old from then on
    firing = wait_until(lambda: receiver.of("/hook", "firing"), THRESHOLD_S + 40, "the rule fires")
    assert firing[0]["at"] - crossed_at <= LIMIT_S, firing[0]["at"] - crossed_at
    assert firing[0]["at"] >= crossed_at - 1  # not before the condition held

    def delivered(channel: str, kind: str):
        with plane.client(key) as api:
            events = api.get(f"/api/v1/alerts/{rule_id}/history").json()["events"]
        return [d for e in events if e["kind"] == kind for d in e["deliveries"]
                if d["channel"] == channel and d["status"] == "delivered"]

    wait_until(lambda: delivered("hook", "firing"), 20, "the firing delivery recorded")
    # The monitoring worker (beat and evaluation) dies between firing and resolving, and comes back.
    kill_monitoring_worker(plane.monitoring)
    plane.monitoring = start_monitoring_worker(plane)

    async def catch_up() -> None:
        async with TidewayClient(plane.deployment.bootstrap, api_key=key) as client:
            member = GroupConsumer(client, "workers", [name], auto_offset_reset="earliest", enable_auto_commit=False)
            await member.start()
            got = 0
            while got < 90:
                got += sum(len(r) for r in (await member.getmany(timeout_ms=1000)).values())
            await member.commit()
            await member.stop()

    asyncio.run(catch_up())
    recovered_at = time.time()
    resolved = wait_until(lambda: receiver.of("/hook", "resolved"), 60, "the rule resolves")
    assert resolved[0]["at"] - recovered_at <= LIMIT_S + 5, resolved[0]["at"] - recovered_at  # (+ the worker's start)
    time.sleep(12)  # another evaluation or two: nothing more may arrive

    hooks = [r for r in receiver.received if r["path"] == "/hook"]
    assert [r["type"] for r in hooks] == ["alert.firing", "alert.resolved"], hooks  # exactly one of each
    assert all(r["valid"] for r in receiver.received), receiver.received
    assert len({r["id"] for r in hooks}) == 2
    wait_until(lambda: sorted(s.split(":")[0] for _to, s in plane.mailbox.messages) == ["[Tideway] workers behind is firing",
                                                                                  "[Tideway] workers behind is resolved"],
          30, f"two e-mails ({plane.mailbox.messages})")
    assert {to for to, _s in plane.mailbox.messages} == {"ops@example.com"}

    # The failing receiver: two 500s, then delivered; every attempt in the API.
    flaky = wait_until(lambda: delivered("flaky", "firing"), 60, "the flaky receiver's firing delivered after retries")
    assert [a["status_code"] for a in flaky[0]["attempts"]] == [500, 500, 204], flaky
    with plane.client(key) as api:
        listed = api.get(f"/api/v1/notification-channels/{fail.json()['id']}/deliveries").json()
        assert any(d["message_id"] == flaky[0]["message_id"] and len(d["attempts"]) == 3 for d in listed), listed
        state = api.get(f"/api/v1/alerts/{rule_id}").json()
        assert state["state"] == "OK"
        history = api.get(f"/api/v1/alerts/{rule_id}/history").json()["events"]
        assert [(e["kind"], e["from"], e["to"]) for e in history] == [("resolved", "FIRING", "OK"), ("firing", "OK", "FIRING")]
        test = api.post(f"/api/v1/notification-channels/{hook.json()['id']}/test")
        assert test.status_code == 200 and test.json()["status"] == "delivered", test.text
    assert receiver.of("/hook", "test") and receiver.of("/hook", "test")[0]["valid"]

    # The same through the CLI.
    def cli(*args: str) -> str:
        import subprocess
        import sys

        from tests.harness.processes import REPO_ROOT

        done = subprocess.run([sys.executable, "-m", "tideway_server.cli.main", *args, "--api", plane.base_url, "--api-key", key],
                              cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert "workers behind" in cli("alerts", "list") and " OK " in cli("alerts", "list")
    shown = cli("alerts", "history", str(rule_id))
    assert "firing" in shown and "resolved" in shown and "hook: delivered" in shown
    assert "now: 0 messages behind" in cli("lag", name, "workers")
    assert "silenced until" in cli("alerts", "silence", str(rule_id), "--minutes", "5")
