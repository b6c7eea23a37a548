"""The playground's browser for the tests that drive it: Debian's chromium, headless, through Playwright
(its own download is not used), with Chromium's fake microphone, and one page visit at a time."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

from playwright.sync_api import expect, sync_playwright

CHROMIUM = "/usr/bin/chromium"  # Debian's package (make setup installs it)
FAKE_MEDIA = ["--use-fake-device-for-media-stream", "--use-fake-ui-for-media-stream"]
WAIT_MS = 120_000  # how long an expectation waits for the page before the test fails


@contextlib.contextmanager
def chromium():
    assert Path(CHROMIUM).is_file(), f"{CHROMIUM} is missing: run `make setup` (it installs Debian's chromium)"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FAKE_MEDIA)
        yield browser
        browser.close()


class Visit:
    """One browser context on a server's page: what it logged as errors, and every URL it asked for."""

    def __init__(self, browser, url: str, key: str | None):
        self.context = browser.new_context(base_url=url, viewport={"width": 390, "height": 844})  # a phone
        self.context.set_default_timeout(WAIT_MS)
        expect.set_options(timeout=WAIT_MS)
        if key is not None:
            self.context.add_init_script(f"localStorage.setItem('omnivoice-api-key', {json.dumps(key)})")
        self.errors, self.requests = [], []
        self.page = self.context.new_page()
        self.page.on("console", lambda message: message.type == "error" and self.errors.append(message.text))
        self.page.on("pageerror", lambda error: self.errors.append(str(error)))
        self.page.on("request", lambda request: self.requests.append(request))
        self.page.goto("/")

    def close(self):
        self.context.close()
