"""The console against a live standalone node, in a real browser: its pages show
the node's real data, live updates arrive without a reload, admin actions take
effect only with the admin token (typed in, never in a URL), and axe-core finds
no serious or critical accessibility violation."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.app.conftest import LiveServer
from tests.console.conftest import ADMIN_TOKEN, axe_violations, screenshot


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    server = LiveServer(tmp_path_factory.mktemp("console") / "data",
                        {"admin_token": ADMIN_TOKEN}).start()
    try:
        yield server
    finally:
        server.stop()


# True once both charts have shown a rate above zero (remembered across frames).
SEEN_RATES = """() => {
  const seen = (window.__seenRates = window.__seenRates || {});
  for (const id of ["chart-adds-value", "chart-latency-value"]) {
    const shown = document.querySelector(`[data-testid=${id}]`);
    if (shown && Number(shown.textContent) > 0) seen[id] = true;
  }
  return seen["chart-adds-value"] && seen["chart-latency-value"];
}"""


def _create(node: LiveServer, **metadata: str) -> int:
    made = httpx.post(f"{node.url}/api/v1/ledgers", json={"password": "pw", "metadata": metadata},
                      timeout=10)
    assert made.status_code == 201, made.text
    return int(made.json()["ledger_id"])


def _add(node: LiveServer, ledger_id: int, payload: bytes) -> int:
    added = httpx.post(f"{node.url}/api/v1/ledgers/{ledger_id}/entries", content=payload,
                       headers={"X-Ledger-Password": "pw"}, timeout=10)
    assert added.status_code == 201, added.text
    return int(added.json()["entry_id"])


def _sign_in(page: Any) -> None:
    page.get_by_test_id("token-input").fill(ADMIN_TOKEN)
    page.get_by_test_id("token-submit").click()
    page.get_by_test_id("admin-badge").wait_for()


def test_served_with_a_strict_policy_and_nothing_from_outside(node: LiveServer) -> None:
    index = httpx.get(f"{node.url}/console/", timeout=10)
    assert index.status_code == 200
    policy = index.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "connect-src 'self'" in policy
    assert "frame-ancestors 'none'" in policy
    # Every script and style is the node's own: no absolute URL in the page.
    assert "http://" not in index.text and "https://" not in index.text and "//" not in \
        index.text.replace("<!doctype", "")
    assert httpx.get(f"{node.url}/console", timeout=10).status_code == 308
    assert httpx.get(f"{node.url}/console/assets/nothing.js", timeout=10).status_code == 404
    assert httpx.get(f"{node.url}/console/assets/..%2Fsources", timeout=10).status_code == 404


def test_overview_shows_the_node_and_its_adds_arrive_live(node: LiveServer, page: Any) -> None:
    from playwright.sync_api import expect

    ledger_id = _create(node, topic="overview")
    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    page.goto(f"{node.url}/console/")
    expect(page.get_by_test_id("bookie-id")).not_to_be_empty()
    info = httpx.get(f"{node.url}/api/v1/bookie/info", timeout=10).json()
    expect(page.get_by_test_id("bookie-id")).to_have_text(info["bookie_id"])
    expect(page.get_by_test_id("read-only")).to_have_text("writable")
    # No admin controls without the token.
    expect(page.get_by_test_id("toggle-read-only")).to_have_count(0)
    # Once the chart has its first point (a rate needs two scrapes), adds made
    # now show in it without a reload.
    adds = page.get_by_test_id("chart-adds-value")
    expect(adds).to_have_text(re.compile(r"^\d+\.\d$"))
    for i in range(20):
        _add(node, ledger_id, b"x%d" % i)
    # A rate is above zero for one scrape interval: watched at every frame.
    page.wait_for_function(SEEN_RATES, timeout=10_000)
    expect(page.get_by_test_id("chart-adds").locator("canvas")).to_have_count(1)
    screenshot(page, "overview")
    assert axe_violations(page) == []
    assert all(url.startswith(node.url) for url in requests), requests


def test_a_ledger_page_follows_its_lac_and_shows_entries(node: LiveServer, page: Any) -> None:
    from playwright.sync_api import expect

    ledger_id = _create(node, topic="orders")
    _add(node, ledger_id, b"first entry")
    page.goto(f"{node.url}/console/#/ledgers/{ledger_id}")
    expect(page.get_by_test_id("ledger-lac")).to_have_text("0")
    expect(page.get_by_test_id("first-entry")).to_have_text("first entry")
    _add(node, ledger_id, b"second")
    last = _add(node, ledger_id, bytes([0, 1, 2, 255]))
    expect(page.get_by_test_id("ledger-lac")).to_have_text(str(last))  # live, no reload
    expect(page.get_by_test_id("last-entry")).to_contain_text("00 01 02 ff")  # not text: hex
    expect(page.get_by_test_id("offload-state")).to_have_text("NONE")
    screenshot(page, "ledger")
    assert axe_violations(page) == []


def test_the_ledger_list_filters_by_metadata_and_state_and_pages(node: LiveServer,
                                                                  page: Any) -> None:
    from playwright.sync_api import expect

    mine = [_create(node, team="blue") for _ in range(3)]
    _create(node, team="red")
    page.goto(f"{node.url}/console/#/ledgers")
    expect(page.get_by_test_id("ledger-table")).to_be_visible()
    page.get_by_test_id("filter-metadata").fill("team=blue")
    page.get_by_test_id("filter-apply").click()
    rows = page.get_by_test_id("ledger-table").locator("tbody tr")
    expect(rows).to_have_count(3)
    expect(rows.first.locator("td").first).to_have_text(str(mine[0]))
    page.get_by_test_id("filter-state").select_option("CLOSED")
    page.get_by_test_id("filter-apply").click()
    expect(rows).to_have_count(0)
    screenshot(page, "ledgers")
    assert axe_violations(page) == []


def test_admin_actions_need_the_token_and_take_effect(node: LiveServer, page: Any) -> None:
    from playwright.sync_api import expect

    before = httpx.get(f"{node.url}/api/v1/bookie/gc_details", timeout=10).json()["runs"]
    page.goto(f"{node.url}/console/#/gc")
    expect(page.get_by_test_id("gc-runs")).to_have_text(str(before))
    expect(page.get_by_test_id("gc-run")).to_have_count(0)  # read-only without the token
    page.get_by_test_id("token-input").fill("not-the-token")
    page.get_by_test_id("token-submit").click()
    expect(page.get_by_role("alert")).to_contain_text("not this node's admin token")
    sent: list[tuple[str, str | None]] = []
    page.on("request", lambda r: sent.append((r.url, r.headers.get("authorization"))))
    _sign_in(page)
    page.get_by_test_id("gc-run").click()
    # The run shows up in the page (polled) and in the API.
    expect(page.get_by_test_id("gc-runs")).not_to_have_text(str(before), timeout=15_000)
    assert httpx.get(f"{node.url}/api/v1/bookie/gc_details", timeout=10).json()["runs"] > before
    page.get_by_test_id("gc-suspend").click()
    expect(page.get_by_test_id("gc-resume")).to_be_visible()
    suspended = httpx.get(f"{node.url}/api/v1/bookie/gc/suspend_compaction", timeout=10).json()
    assert suspended == {"is_major_gc_suspended": True, "is_minor_gc_suspended": True}
    screenshot(page, "gc")
    assert axe_violations(page) == []
    page.get_by_test_id("gc-resume").click()
    expect(page.get_by_test_id("gc-suspend")).to_be_visible()
    # The token went as a header, never in a URL; it sits in the tab's sessionStorage.
    assert any(auth == f"Bearer {ADMIN_TOKEN}" for _, auth in sent)
    assert not any(ADMIN_TOKEN in url for url, _ in sent)
    assert ADMIN_TOKEN not in page.url
    assert page.evaluate("sessionStorage.getItem('ledgerd.adminToken')") == ADMIN_TOKEN


def test_fence_from_the_ledger_page(node: LiveServer, page: Any) -> None:
    from playwright.sync_api import expect

    ledger_id = _create(node)
    page.goto(f"{node.url}/console/#/ledgers/{ledger_id}")
    expect(page.get_by_test_id("ledger-state")).to_have_text("OPEN")
    page.get_by_test_id("ledger-password").fill("wrong")
    page.get_by_test_id("fence").click()
    expect(page.get_by_role("status")).to_contain_text("EUA")
    page.get_by_test_id("ledger-password").fill("pw")
    page.get_by_test_id("fence").click()
    expect(page.get_by_test_id("ledger-state")).to_have_text("FENCED")
    state = httpx.get(f"{node.url}/api/v1/ledgers/{ledger_id}", timeout=10).json()["state"]
    assert state == "FENCED"


def test_read_only_mode_from_the_overview(node: LiveServer, page: Any) -> None:
    from playwright.sync_api import expect

    page.goto(f"{node.url}/console/")
    _sign_in(page)
    page.get_by_test_id("toggle-read-only").click()
    expect(page.get_by_test_id("read-only")).to_have_text("read-only")
    assert httpx.get(f"{node.url}/api/v1/bookie/state/readonly", timeout=10).json() == {
        "read_only": True}
    page.get_by_test_id("toggle-read-only").click()
    expect(page.get_by_test_id("read-only")).to_have_text("writable")


def test_offload_and_cluster_pages_say_what_is_off(node: LiveServer, page: Any) -> None:
    from playwright.sync_api import expect

    page.goto(f"{node.url}/console/#/offload")
    expect(page.get_by_test_id("offload-off")).to_be_visible()
    assert axe_violations(page) == []
    page.goto(f"{node.url}/console/#/cluster")
    expect(page.get_by_test_id("standalone")).to_be_visible()
    assert axe_violations(page) == []


