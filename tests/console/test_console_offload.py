"""The console offloading a ledger to a real S3 (Ceph radosgw): the action, with
the admin token, on the ledger page; the ledger's offload state and the offload
page's counts follow without a reload."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.app.conftest import LiveServer
from tests.console.conftest import ADMIN_TOKEN, axe_violations, screenshot
from tools.local_s3 import LocalS3Server


@pytest.fixture
def node(tmp_path: Path, s3_server: LocalS3Server, s3_bucket: tuple[Any, str],
         monkeypatch: pytest.MonkeyPatch) -> Iterator[LiveServer]:
    for name, value in s3_server.env().items():  # boto3's standard credential chain
        monkeypatch.setenv(name, value)
    server = LiveServer(tmp_path / "data", {
        "admin_token": ADMIN_TOKEN, "s3_endpoint_url": s3_server.endpoint_url,
        "s3_bucket": s3_bucket[1]}).start()
    try:
        yield server
    finally:
        server.stop()


def test_offload_a_ledger_from_its_page(node: LiveServer, page: Any) -> None:
    from playwright.sync_api import expect

    with httpx.Client(base_url=node.url, timeout=10) as http:
        lid = http.post("/api/v1/ledgers", json={"password": "pw"}).json()["ledger_id"]
        for i in range(10):
            assert http.post(f"/api/v1/ledgers/{lid}/entries", content=b"e%d" % i,
                             headers={"X-Ledger-Password": "pw"}).status_code == 201
        assert http.post(f"/api/v1/ledgers/{lid}/close",
                         headers={"X-Ledger-Password": "pw"}).status_code == 200
    page.goto(f"{node.url}/console/#/offload")
    expect(page.get_by_test_id("offload-completed")).to_have_text("0")
    page.goto(f"{node.url}/console/#/ledgers/{lid}")
    expect(page.get_by_test_id("offload-state")).to_have_text("NONE")
    expect(page.get_by_test_id("offload")).to_have_count(0)  # admins only
    page.get_by_test_id("token-input").fill(ADMIN_TOKEN)
    page.get_by_test_id("token-submit").click()
    page.get_by_test_id("offload").click()
    expect(page.get_by_test_id("offload-state")).to_have_text("OFFLOADED", timeout=20_000)
    offload = httpx.get(f"{node.url}/api/v1/ledgers/{lid}/offload", timeout=10).json()
    assert offload["state"] == "OFFLOADED" and offload["segment_bytes"] > 0
    page.goto(f"{node.url}/console/#/offload")
    expect(page.get_by_test_id("offload-completed")).to_have_text("1")
    screenshot(page, "offload")
    assert axe_violations(page) == []
