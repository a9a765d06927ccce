"""Fixtures of the console's browser tier: headless Debian Chromium driven by Playwright.

Playwright's own browser download is never used: the system ``chromium`` (``CHROMIUM_BIN``, else
``/usr/bin/chromium``) is launched through ``executable_path``. Screenshots go to
``JETRAFT_ARTIFACTS_DIR`` (default ``<repo>/test-artifacts/console``).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import AsyncIterator

import pytest

REPO_ROOT = Path(__file__).resolve().parents[3]
ARTIFACTS = Path(os.environ.get("JETRAFT_ARTIFACTS_DIR", REPO_ROOT / "test-artifacts" / "console"))


def chromium_path() -> str | None:
    for cand in (os.environ.get("CHROMIUM_BIN"), "/usr/bin/chromium", shutil.which("chromium")):
        if cand and os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    return None


class Page:
    """A browser page plus the JavaScript errors it logged (a test fails on any)."""

    def __init__(self, page, name: str) -> None:
        self.page = page
        self.name = name
        self.errors: list[str] = []
        page.on("console", lambda m: self.errors.append(f"console.{m.type}: {m.text}") if m.type == "error" else None)
        page.on("pageerror", lambda e: self.errors.append(f"uncaught: {e}"))

    async def shot(self, label: str) -> Path:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{self.name}-{label}.png"
        await self.page.screenshot(path=str(path), full_page=True)
        return path

    def assert_no_errors(self, allow: tuple[str, ...] = ()) -> None:
        bad = [e for e in self.errors if not any(a in e for a in allow)]
        assert not bad, "JavaScript errors on the page:\n" + "\n".join(bad)


@pytest.fixture
async def browser() -> AsyncIterator[object]:
    from playwright.async_api import async_playwright

    exe = chromium_path()
    if exe is None:
        pytest.fail("no chromium found (apt-get install chromium, or set CHROMIUM_BIN)", pytrace=False)
    async with async_playwright() as pw:
        b = await pw.chromium.launch(executable_path=exe, headless=True, args=["--no-sandbox", "--disable-gpu"])
        try:
            yield b
        finally:
            await b.close()


@pytest.fixture
async def new_page(browser, request) -> AsyncIterator[object]:
    pages: list[Page] = []

    async def make(label: str = "") -> Page:
        ctx = await browser.new_context(viewport={"width": 1280, "height": 860})
        page = await ctx.new_page()
        page.set_default_timeout(10_000)
        p = Page(page, request.node.name + (f"-{label}" if label else ""))
        pages.append(p)
        return p

    yield make
    for p in pages:
        await p.page.context.close()
