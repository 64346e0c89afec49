"""Fixtures for the console's browser tests: Debian's Chromium driven by
Playwright (launched from /usr/bin/chromium, never downloaded), against live
``ledgerd serve`` processes built from this tree.

Every wait is bounded (Playwright's default timeouts are set low), and the
browser is closed, and Playwright's driver stopped, in teardown whatever the
test did.  ``LEDGERD_CONSOLE_SCREENSHOTS=DIR`` makes the tests save the
screenshots of docs/console.md there (``make console-screenshots``).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require

REPO = Path(__file__).resolve().parents[2]
CONSOLE = REPO / "console"
AXE = CONSOLE / "node_modules" / "axe-core" / "axe.min.js"
CHROMIUM = "/usr/bin/chromium"
# Flags of a quiet, headless, throw-away browser: nothing fetched from anywhere.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-dev-shm-usage"]
ACTION_TIMEOUT_MS = 10_000
ADMIN_TOKEN = "console-admin-token"
SCREENSHOTS_ENV = "LEDGERD_CONSOLE_SCREENSHOTS"


def _missing() -> str | None:
    if not Path(CHROMIUM).exists():
        return f"{CHROMIUM} is not installed: run scripts/install-console.sh as root"
    if not (CONSOLE / "dist" / "index.html").exists() or not AXE.exists():
        return "the console is not built: run scripts/install-console.sh (Node >= 20.19)"
    try:
        import playwright  # noqa: F401
    except ImportError:
        return "the playwright package is not installed (make install)"
    return None


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One Chromium for the module, with a fresh profile directory."""
    require(_missing())
    from playwright.sync_api import sync_playwright

    profile = tmp_path_factory.mktemp("chromium-profile")
    with sync_playwright() as playwright:
        # A persistent context is the only way to name the profile directory;
        # axe-core is injected by <script> tag, which the console's CSP would refuse.
        context = playwright.chromium.launch_persistent_context(
            str(profile), executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True,
            bypass_csp=True, viewport={"width": 1280, "height": 900}, timeout=30_000)
        try:
            context.set_default_timeout(ACTION_TIMEOUT_MS)
            context.set_default_navigation_timeout(ACTION_TIMEOUT_MS)
            yield context
        finally:
            context.close()  # the driver kills the browser with it
    shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A fresh tab; a test's page errors fail it."""
    tab = browser.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        yield tab
    finally:
        tab.close()
    assert not errors, errors


def axe_violations(page: Any) -> list[dict[str, Any]]:
    """axe-core's serious and critical violations on the page as it is now."""
    page.add_script_tag(content=AXE.read_text())
    result = page.evaluate("async () => (await axe.run(document)).violations")
    return [{"id": v["id"], "impact": v["impact"], "help": v["help"],
             "nodes": [n["html"][:200] for n in v["nodes"]]}
            for v in result if v["impact"] in ("serious", "critical")]


def screenshot(page: Any, name: str) -> None:
    """Save docs/console/<name>.png-style shots when asked (not on every CI run)."""
    where = os.environ.get(SCREENSHOTS_ENV)
    if where:
        Path(where).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(where) / f"{name}.png"), full_page=True)
