"""The console in Chromium against a real deployment: a new tenant signs up, creates a queue with the form and
sees its partitions with leaders and in-sync replicas (issue 16, first part). No page logs a console error,
every form field has a label, and every page visited is saved as a screenshot under test-results/console/."""

from __future__ import annotations

import csv
import json
import re
import time
import uuid

import httpx
import pytest
from playwright.sync_api import expect, sync_playwright

from tests.browser.test_websocket_page import CHROMIUM, CHROMIUM_ARGS
from tests.harness.processes import REPO_ROOT

pytestmark = pytest.mark.browser
SCREENSHOTS = REPO_ROOT / "test-results" / "console"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    """The browser tests' deployment, with filtered searches showing their progress at once (not after 0.5 s)."""
    from tests.harness.control_plane import running_control_plane

    home = tmp_path_factory.mktemp("console")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TIDEWAY_CONSOLE_SEARCH_WAIT_S", "0")
        with running_control_plane(home, f"sqlite://{home}/control.sqlite3") as plane:
            yield plane


def _post(api: httpx.Client, path: str, body: dict) -> httpx.Response:
    """A REST call as a well-behaved client makes it: a 429 is retried after its Retry-After."""
    for _ in range(10):
        answer = api.post(path, json=body)
        if answer.status_code != 429:
            return answer
        time.sleep(float(answer.headers.get("Retry-After", "1")))
    return answer


def _unlabelled_fields(page) -> list[str]:
    return page.evaluate("""() => [...document.querySelectorAll('input:not([type=hidden]), select, textarea')]
        .filter(f => !(f.id && document.querySelector(`label[for="${f.id}"]`)) && !f.closest('label'))
        .map(f => f.name || f.id || f.outerHTML.slice(0, 60))""")


def _accessibility_problems(page) -> list[str]:
    """axe-core's serious and critical violations on the page (WCAG 2 A and AA rules), one line each."""
    from axe_playwright_python.sync_playwright import Axe

    found = Axe().run(page, options={"runOnly": {"type": "tag", "values": ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa",
                                                                            "best-practice"]}}).response
    return [f"{v['id']} ({v['impact']}): {v['help']}: {[n['target'] for n in v['nodes'][:3]]}"
            for v in found["violations"] if v["impact"] in ("serious", "critical")]


def test_a_new_tenant_signs_up_creates_a_queue_and_sees_its_partitions(gateway):
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    suffix = uuid.uuid4().hex[:6]
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            problems: list[str] = []
            page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
            page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
            visited: list[str] = []
            accessibility: dict[str, list[str]] = {}

            def check(name: str, on=None) -> None:
                shown = on or page
                assert _unlabelled_fields(shown) == [], f"{name}: fields without a label"
                accessibility[name] = _accessibility_problems(shown)
                shown.screenshot(path=str(SCREENSHOTS / f"{len(visited):02d}-{name}.png"), full_page=True)
                # No page wider than its window, on a laptop and on a phone (issue 43): wide tables scroll
                # in their own box, the header and toolbars wrap.
                for width, height in ((1280, 800), (390, 844)):
                    shown.set_viewport_size({"width": width, "height": height})
                    wide = shown.evaluate("document.documentElement.scrollWidth")
                    widest = shown.evaluate("""(w) => [...document.querySelectorAll('body *')]
                        .filter(e => e.getBoundingClientRect().right > w + 1)
                        .slice(0, 3).map(e => e.tagName + '.' + e.className + '#' + e.id)""", width)
                    assert wide <= width, f"{name}: {wide} px wide in a {width} px window: {widest}"
                shown.screenshot(path=str(SCREENSHOTS / f"{len(visited):02d}-{name}-phone.png"), full_page=True)
                shown.set_viewport_size({"width": 1280, "height": 800})
                visited.append(name)

            page.goto(f"{gateway.base_url}/")
            expect(page).to_have_url(f"{gateway.base_url}/console/signin?next=/console/")
            check("signin")
            page.get_by_role("link", name="Create an account").click()
            check("signup")
            page.get_by_label("Email").fill(f"erin-{suffix}@example.com")
            page.get_by_role("button", name="Send me the link").click()
            expect(page.get_by_role("status")).to_contain_text(f"erin-{suffix}@example.com")
            check("signup-sent")
            page.get_by_role("link", name="Finish creating your account").click()  # (a development site shows it)
            page.get_by_label("User name").fill(f"erin-{suffix}")
            page.get_by_label("Password").fill("a long enough password")
            page.get_by_label("Organisation").fill(f"Erin {suffix}")
            check("signup-finish")
            page.get_by_role("button", name="Create account").click()
            expect(page.get_by_role("heading", name=f"Erin {suffix}")).to_be_visible()
            check("dashboard")

            page.get_by_role("link", name="Queues", exact=True).click()
            check("queues")
            # The onboarding panel leads the way (issue 43): the first queue, then a key, then a first message.
            page.get_by_role("link", name="Dashboard").click()
            page.locator("#onboarding").get_by_role("link", name="Create your first queue").click()
            check("create-queue")
            page.get_by_label("Name").fill("orders")
            page.get_by_label("Partitions").fill("2")
            page.get_by_label("Replication factor").fill("3")
            page.get_by_label("Deliveries before dead-lettering").fill("1")
            page.get_by_role("button", name="Create").click()
            expect(page.get_by_role("heading", name="orders")).to_be_visible(timeout=30_000)
            table = page.get_by_role("table", name="Partitions")
            expect(table.get_by_role("row")).to_have_count(3)  # header and two partitions
            for row in range(1, 3):
                cells = table.get_by_role("row").nth(row).get_by_role("cell")
                expect(cells.nth(1)).to_contain_text("broker ")  # a leader
                assert len(cells.nth(3).inner_text().split(",")) == 3, "every replica in sync"
                expect(cells.nth(6)).to_have_text("0")  # log end
                expect(cells.nth(7)).to_have_attribute("data-bytes", re.compile(r"^\d+$"))  # size on disk
            check("queue")
            page.get_by_role("link", name="Edit settings…").click()
            expect(page.get_by_label("Name")).to_be_disabled()  # fixed at creation
            page.get_by_label("Visibility timeout (ms)").fill("45000")
            check("queue-edit")
            page.get_by_role("button", name="Save").click()
            expect(page.get_by_role("table", name="Settings")).to_contain_text("45 seconds")  # the settings in words (issue 43)

            page.goto(f"{gateway.base_url}/console/queues?q=ord")
            expect(page.get_by_role("link", name="orders")).to_be_visible()

            # Produce a test message from the page, then find it by key and by time.
            before = time.gmtime(time.time() - 2)
            page.goto(f"{gateway.base_url}/console/queues/orders/messages")
            check("messages")
            page.get_by_label("Key", exact=True).fill("order-42")
            page.get_by_label("Value", exact=True).fill('{"id": 42}')
            page.get_by_label("Headers (one").fill("source: console")
            page.get_by_role("button", name="Produce").click()
            expect(page.get_by_role("status")).to_contain_text("Published: partition")
            messages = page.get_by_role("table", name="Messages")
            expect(messages).to_contain_text("order-42")
            # the message's detail pane (issue 43): its value as indented JSON, with its headers, to copy or download
            messages.locator("details.message-detail summary").first.click()
            pane = messages.locator("details.message-detail[open] pre").first
            expect(pane).to_contain_text('"id": 42')
            expect(pane).to_contain_text('"source": "console"')
            with page.expect_download() as saved:
                messages.locator("details.message-detail[open]").get_by_role("link", name="Download").click()
            assert json.loads(open(saved.value.path()).read())["value"] == {"id": 42}
            check("message-detail")
            page.get_by_label("Show").select_option("latest")
            page.get_by_label("Key contains").fill("order-4")
            page.evaluate("""() => { window.sawProgress = false;
                new MutationObserver(() => { if (document.querySelector('#search-progress progress')) window.sawProgress = true; })
                    .observe(document.getElementById('message-rows'), {childList: true, subtree: true}); }""")
            page.get_by_role("button", name="Search").click()
            page.wait_for_function("window.sawProgress")  # a filtered search shows its progress while it runs ...
            expect(page.locator("#search-progress")).to_have_count(0)  # ... then its results
            expect(messages.get_by_role("row")).to_have_count(2)
            expect(messages).to_contain_text('{"id": 42}')
            page.get_by_label("Key contains").fill("")
            page.get_by_label("Header", exact=True).fill("source=console")
            page.get_by_role("button", name="Search").click()
            expect(messages.get_by_role("row")).to_have_count(2)
            page.get_by_label("Header", exact=True).fill("source=web")
            page.get_by_role("button", name="Search").click()
            expect(messages).to_contain_text("No message matches")
            page.get_by_label("Header", exact=True).fill("")
            page.get_by_label("JSON path").fill("id=42")
            page.get_by_role("button", name="Search").click()
            expect(messages.get_by_role("row")).to_have_count(2)
            page.get_by_label("JSON path").fill("id=41")
            page.get_by_role("button", name="Search").click()
            expect(messages).to_contain_text("No message matches")
            page.get_by_label("JSON path").fill("")
            page.get_by_label("Show").select_option("time")
            page.get_by_label("Time").fill(time.strftime("%Y-%m-%dT%H:%M:%S", before))
            page.get_by_role("button", name="Search").click()
            expect(messages).to_contain_text("order-42")
            check("messages-found")
            with page.expect_download() as download:
                page.get_by_role("link", name="JSON").click()
            exported = json.loads(open(download.value.path()).read())
            assert [m["key"] for m in exported["messages"]] == ["order-42"]

            # An API key from the onboarding panel's link to the keys page, shown once.
            page.get_by_role("link", name="Dashboard").click()
            onboarding = page.locator("#onboarding")
            expect(onboarding).to_contain_text("✓ Your first queue: orders")
            onboarding.get_by_role("link", name="Create an API key").click()
            page.get_by_label("Name", exact=True).fill("browser test")
            page.get_by_label("manage").check()
            page.get_by_role("button", name="Create key").click()
            key = page.get_by_label("Key", exact=True).input_value()
            assert key.startswith("tw_")
            check("keys")
            page.get_by_role("link", name="Dashboard").click()
            expect(onboarding).to_contain_text("✓ An API key exists")
            onboarding.get_by_text("Snippets for orders").click()
            snippet = onboarding.locator("pre").first.inner_text()
            # the first message (produced on the messages page above) read back with the snippet's receive line
            receive_url = re.search(r"(http\S+/api/v1/queues/orders/groups/workers/receive)", snippet).group(1)
            assert receive_url.startswith(gateway.base_url)
            with httpx.Client(base_url=gateway.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=30) as api:
                answer = _post(api, receive_url.removeprefix(gateway.base_url), {"wait_seconds": 5})
                assert answer.status_code == 200, answer.text
                received = answer.json()["messages"]
                assert [m["key"] for m in received] == ["order-42"]
                nacked = _post(api, "/api/v1/queues/orders/groups/workers/nack",
                               {"receipts": [received[0]["receipt"]], "error": "cannot parse"})
                assert nacked.status_code == 200, nacked.text  # max deliveries 1: now a dead letter
                page.goto(f"{gateway.base_url}/console/")
                expect(page.locator("#dead-letter-total")).to_have_attribute("data-total", "1", timeout=15_000)
                expect(page.get_by_role("table", name="Dead letters per queue")).to_contain_text("orders")

                page.goto(f"{gateway.base_url}/console/queues/orders/dead-letters")
                letters = page.get_by_role("table", name="Dead letters")
                expect(letters).to_contain_text("cannot parse")
                assert not re.search(r"\bt[0-9]+\.", letters.inner_text()), "a broker-side name leaked into the page"
                expect(letters).to_contain_text("workers")  # the group, by the tenant's own name
                cells = letters.locator("tr").nth(1).locator("td")
                died, published = cells.nth(3).inner_text(), cells.nth(4).inner_text()
                assert published and died > published, (died, published)  # when it died, not when it was sent
                check("dead-letters")
                page.get_by_label("select").first.check()
                page.get_by_role("button", name="Dry run (selected)").click()
                expect(page.get_by_role("status")).to_contain_text("would move 1 dead letter back to orders; nothing was moved")
                expect(letters).to_contain_text("cannot parse")  # still there
                page.get_by_label("select").first.check()
                page.get_by_role("button", name="Redrive selected").click()
                expect(page.get_by_role("status")).to_contain_text("done, 1 moved", timeout=30_000)
                expect(letters).not_to_contain_text("cannot parse")  # the table is fresh after the redrive
                check("redriven")
                again = _post(api, "/api/v1/queues/orders/groups/workers/receive", {"wait_seconds": 10}).json()["messages"]
                assert [m["key"] for m in again] == ["order-42"]
                assert json.loads(again[0]["value"]) == {"id": 42}

                # A lagging group on the queue page: its lag in seconds grows while nobody consumes, then falls to
                # nothing while a consumer drains the queue.
                published = _post(api, "/api/v1/queues/orders/messages", {"messages": [{"value": f"job {i}"} for i in range(200)]})
                assert published.status_code == 200, published.text
                first = _post(api, "/api/v1/queues/orders/groups/drainers/receive", {"max_messages": 1}).json()["messages"]
                assert _post(api, "/api/v1/queues/orders/groups/drainers/ack", {"receipts": [first[0]["receipt"]]}).status_code == 200
                time.sleep(2.5)
                page.goto(f"{gateway.base_url}/console/queues/orders")
                groups = page.get_by_role("table", name="Consumer groups")
                drainers = groups.get_by_role("row").filter(has_text="drainers")
                expect(drainers).to_have_count(1, timeout=15_000)
                lagging = float(drainers.locator("[data-lag-seconds]").get_attribute("data-lag-seconds"))
                assert int(drainers.locator("[data-lag]").get_attribute("data-lag")) == 201 and lagging >= 2.0  # 202 records, 1 acked
                check("queue-lagging")
                while True:
                    batch = _post(api, "/api/v1/queues/orders/groups/drainers/receive", {"max_messages": 100}).json()["messages"]
                    if not batch:
                        break
                    _post(api, "/api/v1/queues/orders/groups/drainers/ack", {"receipts": [m["receipt"] for m in batch]})
                expect(drainers.locator("[data-lag]")).to_have_attribute("data-lag", "0", timeout=15_000)
                expect(page.locator("#throughput canvas")).to_have_count(2)  # messages and bytes
                expect(page.locator("#throughput")).to_have_attribute("data-bytes-out", re.compile(r"^\d"))
                # A few points cover the two minutes the chart shows, not years (issue 43: May 2027 to May 2029).
                spans = page.evaluate("document.querySelector('#throughput').charts"
                                      ".map(u => u.scales.x.max - u.scales.x.min)")
                assert all(110 <= span <= 130 for span in spans), spans
                # The chart's figures arrive as server-sent events: read one as the page does.
                totals = page.evaluate("""url => new Promise(done => { const source = new EventSource(url);
                    source.onmessage = event => { source.close(); done(JSON.parse(event.data)); }; })""",
                                       "/console/queues/orders/counters")
                # 202 records in (the test message, its redrive, 200 jobs); out: every delivery (workers 2, drainers 202)
                # and what the message browser read.
                assert totals["messages_in"] == 202 and totals["messages_out"] >= 204, totals
                assert totals["bytes_in"] > 202 * len("job 0") and totals["bytes_out"] > 202 * len("job 0"), totals
                expect(drainers).to_contain_text("caught up")
                assert float(drainers.locator("[data-lag-seconds]").get_attribute("data-lag-seconds")) < lagging
                drainers.get_by_role("link", name="drainers").click()
                expect(page.get_by_role("heading", name="orders: group drainers")).to_be_visible()
                expect(page.locator("#group-lag")).to_have_attribute("data-lag", "0")
                expect(page.get_by_role("table", name="Group partitions").get_by_role("row")).to_have_count(3)
                check("group")

                # A stream group with no members is moved back to the start from its queue page.
                assert api.post("/api/v1/queues/", json={"name": "events", "mode": "stream", "partitions": 1}).status_code == 201
                assert _post(api, "/api/v1/queues/events/messages", {"messages": [{"value": "e"}] * 5}).status_code == 200
                assert _post(api, "/api/v1/queues/events/groups/analytics/seek", {"to": "latest"}).status_code == 200
                page.goto(f"{gateway.base_url}/console/queues/events")
                page.get_by_label("Move analytics to").select_option("earliest")
                page.get_by_role("button", name="Preview the reset").click()  # where it would go, first (issue 43)
                expect(page.get_by_role("table", name="Positions before and after")).to_contain_text("re-reads 5 records")
                check("group-reset-preview")
                page.get_by_role("button", name="Move the positions").click()
                expect(page.get_by_role("status")).to_contain_text("moved")
                check("group-reset")
                committed = api.get("/api/v1/queues/events/groups/analytics/offsets").json()["partitions"]
                assert [(p["committed"], p["lag"]) for p in committed] == [(0, 5)]

                # Revoked on the keys page: refused over REST (the gateway caches keys for a few seconds).
                page.goto(f"{gateway.base_url}/console/keys")
                page.get_by_role("link", name="Revoke browser test").click()
                expect(page.get_by_text("This cannot be undone")).to_be_visible()  # a typed confirmation (issue 43)
                page.get_by_label("Type the key's name").fill("browser test")
                page.get_by_role("button", name="Revoke").click()
                expect(page.get_by_role("table", name="API keys")).to_contain_text("revoked")
                for _ in range(40):
                    refused = api.post("/api/v1/queues/orders/groups/workers/receive", json={})
                    if refused.status_code == 401:
                        break
                    time.sleep(0.25)
                assert refused.status_code == 401 and refused.json()["code"] == "invalid_credentials"
            page.goto(f"{gateway.base_url}/console/")
            expect(page.get_by_role("table", name="Groups furthest behind")).to_contain_text("workers", timeout=15_000)
            hour = page.locator("#traffic-hour")
            expect(hour.locator("canvas")).to_have_count(2)
            expect(hour).to_have_attribute("data-messages-in", re.compile(r"^\d"))
            assert int(hour.get_attribute("data-messages-in")) >= 202 + 5  # orders and events, this hour
            expect(page.locator("#traffic-hour-summary")).to_contain_text("Last hour:")
            expect(page.get_by_text("No dead letters waiting")).to_be_visible()  # redriven
            check("dashboard-behind")
            page.goto(f"{gateway.base_url}/console/queues")  # messages stored and rates per queue (issue 43)
            expect(page.get_by_role("table", name="Queues").locator("[data-stored]").first).to_have_attribute(
                "data-stored", re.compile(r"^[1-9]\d*$"))
            expect(page.locator("#fig-in-1")).not_to_contain_text("measuring", timeout=15_000)  # a rate after 5 s
            for name in ("members", "audit", "schemas", "transactions", "settings", "keys"):
                page.goto(f"{gateway.base_url}/console/{name}")
                check(f"{name}-page")
            expect(page.get_by_role("table", name="API keys")).to_contain_text("revoked")
            page.goto(f"{gateway.base_url}/console/audit?action=api_key")
            expect(page.get_by_role("table", name="Audit log")).to_contain_text("api_key.revoke")
            # times in the viewer's time zone, with how long ago (issue 43): the browser runs in UTC here
            first_time = page.get_by_role("table", name="Audit log").locator("time[data-shown]").first
            expect(first_time).to_contain_text("UTC")
            expect(first_time.locator("xpath=following-sibling::span[1]")).to_contain_text(re.compile(r"ago|now"))

            # Usage and the invoice: the usage job (Spark) over what the brokers and the gateway metered.
            import subprocess
            import sys

            from tests.harness.processes import REPO_ROOT as ROOT

            job = subprocess.run([sys.executable, "manage.py", "spark_job", "usage_billing", "--master", "local[2]", "--invoices"],
                                 cwd=ROOT, env={**gateway.env, "TIDEWAY_LOG_LEVEL": "WARNING"}, capture_output=True,
                                 text=True, timeout=300)
            assert job.returncode == 0, job.stderr[-2000:]
            page.goto(f"{gateway.base_url}/console/keys")
            page.get_by_label("Name", exact=True).fill("billing reader")
            page.get_by_label("consume").check()
            page.get_by_role("button", name="Create key").click()
            key2 = page.get_by_label("Key", exact=True).input_value()
            page.goto(f"{gateway.base_url}/console/usage")
            expect(page.locator("#usage-charts canvas").first).to_be_visible()
            assert int(page.locator('[data-metric="messages_in"]').inner_text()) >= 202  # what this tenant sent
            check("usage")
            page.goto(f"{gateway.base_url}/console/queues/orders")  # the throughput chart's range (issue 43)
            page.get_by_label("Show").select_option("day")
            expect(page.locator("#throughput")).to_have_attribute("data-points", "24")
            assert int(page.locator("#throughput").get_attribute("data-messages-in")) >= 202  # the job's figures
            expect(page.locator("#throughput canvas")).to_have_count(2)
            check("queue-last-day")
            page.goto(f"{gateway.base_url}/console/invoices")
            page.get_by_role("table", name="Invoices").get_by_role("link").first.click()
            check("invoice")
            with page.expect_download() as download:
                page.get_by_role("link", name="Download CSV").click()
            rows = list(csv.DictReader(open(download.value.path())))
            invoice_id = int(rows[0]["invoice"])
            with httpx.Client(base_url=gateway.base_url, headers={"Authorization": f"Bearer {key2}"}, timeout=30) as api:
                from_api = api.get(f"/api/v1/invoices/{invoice_id}").json()
            assert int(rows[-1]["amount_cents"]) == from_api["total_cents"]  # the CSV's total is the API's
            assert sum(int(r["amount_cents"]) for r in rows[:-1]) == from_api["total_cents"]
            assert {r["metric"] for r in rows if r["kind"] == "usage"} <= {line["metric"] for line in from_api["lines"]}

            # The rest of the console's pages (issue 43: every page, at both widths, with axe-core).
            page.goto(f"{gateway.base_url}/console/invoices")
            check("invoices")
            page.goto(f"{gateway.base_url}/console/password")
            check("password")
            page.goto(f"{gateway.base_url}/console/alerts")
            page.get_by_label("Channel name").fill("ops mail")
            page.get_by_label("Kind").select_option("email")
            page.get_by_label("Webhook URL or e-mail address").fill("not an address")
            page.get_by_role("button", name="Add channel").click()
            expect(page.get_by_label("Webhook URL or e-mail address")).to_have_value("not an address")  # kept
            check("alerts-mistake")
            assert problems.pop() == "console error: Failed to load resource: the server responded with a status of 400 (Bad Request)"  # (the form's own answer)
            page.get_by_label("Webhook URL or e-mail address").fill("ops@example.com")
            page.get_by_role("button", name="Add channel").click()
            page.get_by_label("Name", exact=True).fill("orders behind")
            page.get_by_label("Metric").select_option("lag")
            page.get_by_label("Threshold", exact=True).fill("1000")
            page.get_by_label("ops mail (email)").check()
            page.get_by_role("button", name="Create rule").click()
            expect(page.get_by_role("heading", name="Alerts: orders behind")).to_be_visible()
            check("alert")
            page.get_by_role("link", name="Edit rule").click()
            expect(page.get_by_label("ops mail (email)")).to_be_checked()
            check("alert-edit")
            page.goto(f"{gateway.base_url}/console/alerts")
            check("alerts")
            page.get_by_role("link", name="ops mail", exact=True).click()
            check("channel")
            page.goto(f"{gateway.base_url}/console/alerts")
            page.get_by_role("link", name="Delete ops mail").click()
            expect(page.get_by_text("This cannot be undone")).to_be_visible()
            check("channel-delete")
            page.goto(f"{gateway.base_url}/console/queues/orders")
            page.get_by_role("link", name="Purge messages…").click()
            expect(page.get_by_text("This cannot be undone")).to_be_visible()
            check("queue-purge")
            page.goto(f"{gateway.base_url}/console/queues/orders/delete")
            check("queue-delete")

            # An operator (a staff user) sees the clusters, every tenant and the plans.
            operator, password = gateway.create_operator()
            staff = browser.new_page()
            staff.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
            staff.on("pageerror", lambda e: problems.append(f"page error: {e}"))
            staff.on("response", lambda r: problems.append(f"{r.status} {r.url}") if r.status >= 400 else None)
            staff.goto(f"{gateway.base_url}/console/signin")
            staff.get_by_label("User name").fill(operator)
            staff.get_by_label("Password").fill(password)
            staff.get_by_role("button", name="Sign in").click()
            staff.goto(f"{gateway.base_url}/console/operator/clusters")
            expect(staff.locator("body")).to_contain_text("alive")
            check("operator-clusters", staff)
            staff.goto(f"{gateway.base_url}/console/operator/tenants")
            expect(staff.locator("body")).to_contain_text(f"Erin {suffix}")
            check("operator-tenants", staff)
            staff.goto(f"{gateway.base_url}/console/operator/plans")
            check("operator-plans", staff)
            staff.goto(f"{gateway.base_url}/console/operator/revenue")
            check("operator-revenue", staff)
            staff.goto(f"{gateway.base_url}/console/operator/tenants")
            staff.get_by_role("link", name=re.compile(r"^Suspend erin")).click()
            expect(staff.get_by_text("Resume it on the tenants page")).to_be_visible()  # asks first (issue 43)
            check("operator-suspend", staff)
            assert problems == [], problems
            # axe-core on every page visited (issue 43): no serious or critical violation
            assert {name: found for name, found in accessibility.items() if found} == {}
        finally:
            browser.close()
    assert len(list(SCREENSHOTS.glob("*.png"))) >= len(visited) == 44
