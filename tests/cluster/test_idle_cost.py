"""Issue 28 item 1: an idle cluster does no work per ledger it holds.  Counted, not
timed: etcd's own request counters and the nodes' counters of machines ticked and
ledgers audited, over an idle window, with a few hundred open ledgers."""

from __future__ import annotations

import base64
import re
import time
from pathlib import Path

import httpx

from tools.local_cluster import LiveCluster
from tools.local_etcd import LocalEtcd
from tools.local_server import ServerProcess

LEDGERS = 300
PW = {"X-Ledger-Password": "pw"}
IDLE_S = 6.0  # six auditor rounds (AUDIT_INTERVAL 1), one replica sweep (every 5 s)


def etcd_requests(etcd: LocalEtcd) -> int:
    text = httpx.get(f"{etcd.endpoint}/metrics", timeout=10).text
    return sum(int(float(m)) for m in re.findall(
        r"^etcd_mvcc_(?:range|txn|put)_total (\S+)$", text, re.M))


def node_counter(node: ServerProcess, name: str) -> float:
    found = node.metrics().get(f"ledgerd_cluster_{name}")
    assert found is not None, f"no ledgerd_cluster_{name} in {node.url}/metrics"
    return found


def test_an_idle_cluster_does_no_work_per_ledger(local_etcd: LocalEtcd,
                                                 tmp_path: Path) -> None:
    with LiveCluster(tmp_path / "c", local_etcd.metadata_url("idle"), 3) as cluster:
        urls = [n.url for n in cluster.nodes]
        # etcd's requests with no ledger at all: elections, status, keep-alives.
        before = etcd_requests(local_etcd)
        time.sleep(IDLE_S)  # the window measured
        empty = etcd_requests(local_etcd) - before
        ledger_ids: list[int] = []
        with httpx.Client(timeout=30) as client:
            for i in range(LEDGERS):
                url = urls[i % 3]
                lid = client.post(f"{url}/api/v1/ledgers",
                                  json={"password": "pw"}).json()["ledger_id"]
                ledger_ids.append(lid)
                added = client.post(f"{url}/api/v1/ledgers/{lid}/entries", content=b"x",
                                    headers=PW)
                assert added.status_code == 201, added.text
        # Settled: the explicit LACs written, and each new ledger (a metadata change)
        # audited once by the auditor's next round.
        deadline = time.monotonic() + 60
        while any(node_counter(n, "machines_ticking") for n in cluster.nodes) \
                or sum(node_counter(n, "ledgers_audited_total") for n in cluster.nodes) < LEDGERS:
            assert time.monotonic() < deadline, "writers kept ticking, or audits lagged"
            time.sleep(0.2)  # waiting for the nodes' tick loops and audit rounds
        audited = sum(node_counter(n, "ledgers_audited_total") for n in cluster.nodes)
        before = etcd_requests(local_etcd)
        time.sleep(IDLE_S)  # the window measured: nothing may happen in it
        requests = etcd_requests(local_etcd) - before
        assert all(node_counter(n, "machines_ticking") == 0 for n in cluster.nodes)
        assert sum(node_counter(n, "ledgers_audited_total") for n in cluster.nodes) == audited
        # As many as with no ledger (before: a GET per replica every 5 s and the
        # whole ledger list every round, hundreds in this window).
        assert requests <= empty + 15, f"{requests} etcd requests idle, {empty} empty"
        # Every idle writer sleeps as its state (the ledgers are open, written by the
        # node that created them), and wakes where it was on the next call.
        assert sum(node_counter(n, "writers_idle") for n in cluster.nodes) == LEDGERS
        assert sum(node_counter(n, "ledgers_written") for n in cluster.nodes) == LEDGERS
        with httpx.Client(timeout=30) as client:
            for i, lid in enumerate(ledger_ids[:6]):
                url, entries = urls[i % 3], f"{urls[i % 3]}/api/v1/ledgers/{lid}/entries"
                retried = client.post(f"{entries}?entry_id=0", content=b"x", headers=PW)
                assert retried.status_code == 200, retried.text  # the same bytes at 0
                added = client.post(f"{entries}?entry_id=1", content=b"yy", headers=PW)
                assert added.status_code == 201 and added.json()["entry_id"] == 1, added.text
                batch = client.post(f"{entries}/batch?first_entry_id=1", headers=PW, json={
                    "entries": [base64.b64encode(p).decode() for p in (b"yy", b"zzz")]})
                assert batch.status_code == 201, batch.text  # 1 is there, 2 appended
                assert batch.json()["last_entry_id"] == 2
                read = [client.get(f"{urls[(i + 1) % 3]}/api/v1/ledgers/{lid}/entries/{e}")
                        for e in range(3)]
                assert [r.content for r in read] == [b"x", b"yy", b"zzz"]
            closed = client.post(f"{urls[0]}/api/v1/ledgers/{ledger_ids[0]}/close", headers=PW)
            assert closed.json()["last_add_confirmed"] == 2 and closed.json()["length"] == 6
        deadline = time.monotonic() + 60
        while sum(node_counter(n, "writers_idle") for n in cluster.nodes) != LEDGERS - 1:
            assert time.monotonic() < deadline, "woken writers did not go back to sleep"
            time.sleep(0.2)  # waiting for the nodes' tick loops
