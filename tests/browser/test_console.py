"""The console in Chromium against a real deployment: a new tenant signs up, creates a queue with the form and
sees its partitions with leaders and in-sync replicas (issue 16, first part). No page logs a console error,
every form field has a label, and every page visited is saved as a screenshot under test-results/console/."""

from __future__ import annotations

import uuid

import pytest
from playwright.sync_api import expect, sync_playwright

from tests.browser.test_websocket_page import CHROMIUM, CHROMIUM_ARGS
from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.browser
SCREENSHOTS = REPO_ROOT / "test-results" / "console"


def _unlabelled_fields(page) -> list[str]:
    return page.evaluate("""() => [...document.querySelectorAll('input:not([type=hidden]), select, textarea')]
        .filter(f => !(f.id && document.querySelector(`label[for="${f.id}"]`)) && !f.closest('label'))
        .map(f => f.name || f.id || f.outerHTML.slice(0, 60))""")


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

            def check(name: str) -> None:
                assert _unlabelled_fields(page) == [], f"{name}: fields without a label"
                page.screenshot(path=str(SCREENSHOTS / f"{len(visited):02d}-{name}.png"), full_page=True)
                visited.append(name)

            page.goto(f"{gateway.base_url}/")
            expect(page).to_have_url(f"{gateway.base_url}/console/signin?next=/console/")
            check("signin")
            page.get_by_role("link", name="Create an account").click()
            check("signup")
            page.get_by_label("User name").fill(f"erin-{suffix}")
            page.get_by_label("Email").fill(f"erin-{suffix}@example.com")
            page.get_by_label("Password").fill("a long enough password")
            page.get_by_label("Organisation").fill(f"Erin {suffix}")
            page.get_by_role("button", name="Create account").click()
            expect(page.get_by_role("heading", name=f"Erin {suffix}")).to_be_visible()
            check("dashboard")

            page.get_by_role("link", name="Queues", exact=True).click()
            check("queues")
            page.get_by_role("link", name="Create a queue").click()
            check("create-queue")
            page.get_by_label("Name").fill("orders")
            page.get_by_label("Partitions").fill("2")
            page.get_by_label("Replication factor").fill("3")
            page.get_by_role("button", name="Create").click()
            expect(page.get_by_role("heading", name="orders")).to_be_visible(timeout=30_000)
            table = page.get_by_role("table", name="Partitions")
            expect(table.get_by_role("row")).to_have_count(3)  # header and two partitions
            for row in range(1, 3):
                cells = table.get_by_role("row").nth(row).get_by_role("cell")
                expect(cells.nth(1)).to_contain_text("broker ")  # a leader
                assert len(cells.nth(3).inner_text().split(",")) == 3, "every replica in sync"
            check("queue")

            page.goto(f"{gateway.base_url}/console/queues?q=ord")
            expect(page.get_by_role("link", name="orders")).to_be_visible()
            assert problems == [], problems
        finally:
            browser.close()
    assert len(list(SCREENSHOTS.glob("*.png"))) >= len(visited) == 6
