"""Take docs/playground.png: the playground page of a running serve.py, in Debian's chromium, after speaking.

    .venv/bin/python serve.py --model_dir models/demo-cpu --port 8000 &
    .venv/bin/python tools/playground_screenshot.py [--url http://127.0.0.1:8000] [--out docs/playground.png]

Add --dark for the dark theme. The server needs no --api-key (or give --key).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from playwright.sync_api import expect, sync_playwright

REPO = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "playground.png")
    parser.add_argument("--key", default=None, help="the server's --api-key, if it has one")
    parser.add_argument("--dark", action="store_true", help="the dark theme")
    parser.add_argument("--width", type=int, default=760, help="the window's width in CSS pixels")
    args = parser.parse_args()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium")
        context = browser.new_context(viewport={"width": args.width, "height": 900},
                                      color_scheme="dark" if args.dark else "light")
        if args.key:
            context.add_init_script(f"localStorage.setItem('omnivoice-api-key', {json.dumps(args.key)})")
        page = context.new_page()
        page.goto(args.url)
        expect(page.get_by_role("combobox", name="Voice", exact=True).get_by_role("option")).not_to_have_count(0)
        page.get_by_role("combobox", name="Gender", exact=True).select_option("female")
        page.get_by_role("combobox", name="Age", exact=True).select_option("young adult")
        page.get_by_role("combobox", name="Accent", exact=True).select_option("british accent")
        page.get_by_role("button", name="Speak", exact=True).click()
        expect(page.get_by_role("link", name="Download", exact=True)).to_be_visible(timeout=120_000)
        page.screenshot(path=args.out, full_page=True)
        browser.close()
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
