"""The console against a live three-node cluster (etcd and ``ledgerd serve``
processes, as tools/local_cluster.py runs them): any node's console shows the
members and the auditor, and a ledger's fragments with their bookies and epochs;
axe-core finds no serious or critical violation."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import require
from tests.console.conftest import ADMIN_TOKEN, axe_violations, screenshot
from tools.local_cluster import QUICK_START_SETTINGS, LiveCluster
from tools.local_etcd import LocalEtcd, etcd_available


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveCluster]:
    require(etcd_available())
    root: Path = tmp_path_factory.mktemp("console-cluster")
    settings = {**QUICK_START_SETTINGS, "JOURNAL_CAPACITY": "64MiB", "WRITE_CACHE_SIZE": "4MiB",
                "READ_CACHE_SIZE": "4MiB", "AUDIT_INTERVAL": "1", "ADMIN_TOKEN": ADMIN_TOKEN}
    with LocalEtcd(root / "etcd") as etcd, \
            LiveCluster(root, etcd.metadata_url("console"), 3, settings=settings,
                        names=["node1", "node2", "node3"]) as live:
        yield live


def test_cluster_page_shows_members_and_auditor(cluster: LiveCluster, page: Any) -> None:
    from playwright.sync_api import expect

    url = cluster.nodes[1].url
    page.goto(f"{url}/console/#/cluster")
    rows = page.get_by_test_id("members").locator("tbody tr")
    expect(rows).to_have_count(3)
    for i, name in enumerate(["node1", "node2", "node3"]):
        expect(rows.nth(i).locator("td").first).to_have_text(name)
    expect(page.get_by_test_id("auditor")).to_have_text(re.compile("^node[123]$"))  # elected
    auditor = httpx.get(f"{url}/api/v1/cluster", timeout=10).json()["auditor"]
    expect(page.get_by_test_id("auditor")).to_have_text(auditor)
    expect(page.get_by_test_id("no-under-replicated")).to_be_visible()
    screenshot(page, "cluster")
    assert axe_violations(page) == []


def test_a_ledger_shows_its_fragments_and_lac_from_another_node(cluster: LiveCluster,
                                                                 page: Any) -> None:
    from playwright.sync_api import expect

    writer, viewer = cluster.nodes[0].url, cluster.nodes[2].url
    made = httpx.post(f"{writer}/api/v1/ledgers", json={"password": "pw"}, timeout=10)
    assert made.status_code == 201, made.text
    ledger_id = made.json()["ledger_id"]

    def add(payload: bytes) -> int:
        added = httpx.post(f"{writer}/api/v1/ledgers/{ledger_id}/entries", content=payload,
                           headers={"X-Ledger-Password": "pw"}, timeout=10)
        assert added.status_code == 201, added.text
        return int(added.json()["entry_id"])

    add(b"replicated")
    page.goto(f"{viewer}/console/#/ledgers/{ledger_id}")
    expect(page.get_by_test_id("first-entry")).to_have_text("replicated")
    placement = httpx.get(f"{viewer}/api/v1/cluster/ledgers/{ledger_id}", timeout=10).json()
    fragments = page.get_by_test_id("fragments").locator("tbody tr")
    expect(fragments).to_have_count(len(placement["fragments"]))
    first = placement["fragments"][0]
    expect(fragments.first.locator("td").nth(1)).to_have_text(", ".join(first["bookies"]))
    expect(fragments.first.locator("td").nth(2)).to_have_text(str(first["epoch"]))
    last = add(b"more")
    expect(page.get_by_test_id("ledger-lac")).to_have_text(str(last))  # live, no reload
    screenshot(page, "cluster-ledger")
    assert axe_violations(page) == []
