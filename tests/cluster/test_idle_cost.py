"""Issue 28 item 1: an idle cluster does no work per ledger it holds.  Counted, not
timed: etcd's own request counters and the nodes' counters of machines ticked and
ledgers audited, over an idle window, with a few hundred open ledgers."""

from __future__ import annotations

import re
import time
from pathlib import Path

import httpx

from tools.local_cluster import LiveCluster
from tools.local_etcd import LocalEtcd

LEDGERS = 300
IDLE_S = 6.0  # six auditor rounds (AUDIT_INTERVAL 1), one replica sweep (every 5 s)


def etcd_requests(etcd: LocalEtcd) -> int:
    text = httpx.get(f"{etcd.endpoint}/metrics", timeout=10).text
    return sum(int(float(m)) for m in re.findall(
        r"^etcd_mvcc_(?:range|txn|put)_total (\S+)$", text, re.M))


def node_counter(url: str, name: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    found = re.search(rf"^ledgerd_cluster_{name} (\S+)$", text, re.M)
    assert found, f"no ledgerd_cluster_{name} in {url}/metrics"
    return float(found.group(1))


def test_an_idle_cluster_does_no_work_per_ledger(local_etcd: LocalEtcd,
                                                 tmp_path: Path) -> None:
    with LiveCluster(tmp_path / "c", local_etcd.metadata_url("idle"), 3) as cluster:
        urls = [n.url for n in cluster.nodes]
        # etcd's requests with no ledger at all: elections, status, keep-alives.
        before = etcd_requests(local_etcd)
        time.sleep(IDLE_S)  # the window measured
        empty = etcd_requests(local_etcd) - before
        with httpx.Client(timeout=30) as client:
            for i in range(LEDGERS):
                url = urls[i % 3]
                lid = client.post(f"{url}/api/v1/ledgers",
                                  json={"password": "pw"}).json()["ledger_id"]
                added = client.post(f"{url}/api/v1/ledgers/{lid}/entries", content=b"x",
                                    headers={"X-Ledger-Password": "pw"})
                assert added.status_code == 201, added.text
        # Settled: the explicit LACs written, and each new ledger (a metadata change)
        # audited once by the auditor's next round.
        deadline = time.monotonic() + 60
        while any(node_counter(u, "machines_ticking") for u in urls) \
                or sum(node_counter(u, "ledgers_audited_total") for u in urls) < LEDGERS:
            assert time.monotonic() < deadline, "writers kept ticking, or audits lagged"
            time.sleep(0.2)  # waiting for the nodes' tick loops and audit rounds
        audited = sum(node_counter(u, "ledgers_audited_total") for u in urls)
        before = etcd_requests(local_etcd)
        time.sleep(IDLE_S)  # the window measured: nothing may happen in it
        requests = etcd_requests(local_etcd) - before
        assert all(node_counter(u, "machines_ticking") == 0 for u in urls)
        assert sum(node_counter(u, "ledgers_audited_total") for u in urls) == audited
        # As many as with no ledger (before: a GET per replica every 5 s and the
        # whole ledger list every round, hundreds in this window).
        assert requests <= empty + 15, f"{requests} etcd requests idle, {empty} empty"
