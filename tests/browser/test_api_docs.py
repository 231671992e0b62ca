"""The API docs render in a real browser from the application's own assets, data operations included (issue 15)."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect, sync_playwright

from tests.browser.test_websocket_page import CHROMIUM, CHROMIUM_ARGS

pytestmark = pytest.mark.browser


def test_swagger_ui_and_redoc_show_the_publish_operation(gateway):
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            failed_assets: list[str] = []
            page.on("response", lambda r: failed_assets.append(f"{r.status} {r.url}") if r.status >= 400 else None)
            page.goto(f"{gateway.base_url}/api/docs/")
            publish = page.locator(".opblock-summary", has_text="/api/v1/queues/{name}/messages").filter(has_text="POST")
            expect(publish.first).to_be_visible(timeout=20_000)
            expect(page.get_by_text("Publish messages").first).to_be_visible()
            expect(page.locator(".btn.authorize")).to_be_visible()  # the API-key scheme: "Authorize"
            # a language, a heading and a way back to the console (issue 43), as axe-core checks them
            assert page.locator("html").get_attribute("lang") == "en"
            expect(page.get_by_role("heading", level=1, name="The Tideway REST API")).to_be_visible()
            expect(page.get_by_role("link", name="Tideway console")).to_have_attribute("href", "/console/")
            from axe_playwright_python.sync_playwright import Axe

            checked = Axe().run(page, options={"runOnly": {"type": "rule", "values": [
                "html-has-lang", "html-lang-valid", "page-has-heading-one", "document-title", "landmark-one-main"]}})
            assert checked.response["violations"] == [], checked.generate_snapshot()

            page.goto(f"{gateway.base_url}/api/redoc/")
            expect(page.get_by_role("heading", name="Publish messages")).to_have_count(1, timeout=20_000)
            assert failed_assets == []
        finally:
            browser.close()
