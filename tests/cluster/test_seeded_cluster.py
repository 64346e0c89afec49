"""A seeded cluster (``tools.seed_ledgers.seed_stopped_cluster``) is what creates,
adds and closes leave: after a restart on the seeded state every node serves the
seeded ledgers as CLOSED ones, holds its own replica of each (read back from that
node alone, through the internal replica routes), a create afterwards takes an id
above them, and a seeded ledger is deleted with its password, replicas and all."""

from __future__ import annotations

import base64
import functools
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.cluster.test_cluster_offload import until
from tools.local_cluster import TOKEN, ClusterNodeProcess, LiveCluster
from tools.local_etcd import LocalEtcd
from tools.seed_ledgers import seed_stopped_cluster

COUNT = 2000
# Every byte different: a shifted, truncated or prefixed copy reads back otherwise.
PAYLOAD = bytes(range(100))
PW = {"X-Ledger-Password": "pw"}
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def seeded(local_etcd: LocalEtcd, tmp_path_factory: pytest.TempPathFactory,
           ) -> Iterator[tuple[LiveCluster, list[int]]]:
    """Three nodes started once empty (cookies, password key), stopped, seeded with
    COUNT ledgers, started again."""
    root: Path = tmp_path_factory.mktemp("seeded")
    cluster = LiveCluster(root, local_etcd.metadata_url("seeded-cluster"), 3)
    try:
        cluster.start()
        cluster.stop()
        seeded = seed_stopped_cluster(cluster.metadata_url, cluster.nodes, COUNT,
                                      payload=PAYLOAD, password="pw")
        assert len(seeded.ledger_ids) == len(set(seeded.ledger_ids)) == COUNT
        cluster.start()
        yield cluster, seeded.ledger_ids
    finally:
        cluster.stop()


def _sample(ids: list[int]) -> list[int]:
    """Ledgers spread over the seeded ones, of every writer and ensemble order."""
    return sorted({*ids[::97], *ids[:3], *ids[-3:]})


def _held(node: ClusterNodeProcess, lid: int) -> list[list[int]]:
    """(entry id, epoch) of each entry in the node's own replica of the ledger."""
    held: list[list[int]] = httpx.get(
        f"{node.url}/internal/v1/ledgers/{lid}/replica/entries", headers=AUTH,
        timeout=30).json()["entries"]
    return held


def _replica_gone(node: ClusterNodeProcess, lid: int) -> bool:
    return _held(node, lid) == []


def _listed(url: str) -> dict[int, str]:
    """Every ledger a node lists, with its state."""
    found: dict[int, str] = {}
    after: int | None = None
    while True:
        params: dict[str, int] = {"limit": 1000} | ({} if after is None else {"after": after})
        page = httpx.get(f"{url}/api/v1/ledgers", params=params, timeout=60).json()
        found.update({info["ledger_id"]: info["state"] for info in page["ledgers"]})
        after = page.get("next_after")
        if after is None:
            return found


def test_every_node_lists_the_seeded_ledgers_closed(
        seeded: tuple[LiveCluster, list[int]]) -> None:
    cluster, ids = seeded
    for node in cluster.nodes:
        listed = _listed(node.url)
        assert {i: listed.get(i) for i in ids} == dict.fromkeys(ids, "CLOSED")
        # Each node holds a replica of each (E = Qw = 3 of 3), no more.
        assert node.metrics()["ledgerd_bookie_replica_count"] == COUNT


def test_each_node_reads_its_own_replica_of_each_seeded_ledger(
        seeded: tuple[LiveCluster, list[int]]) -> None:
    cluster, ids = seeded
    for lid in _sample(ids):
        for node in cluster.nodes:
            assert _held(node, lid) == [[0, 1]], (node.bookie_id, lid)  # entry 0, epoch 1
            own = httpx.get(f"{node.url}/internal/v1/ledgers/{lid}/replica/entries/0",
                            headers=AUTH, timeout=30)
            assert own.status_code == 200, (node.bookie_id, lid, own.text)
            assert own.content == PAYLOAD
            assert (own.headers["X-Epoch"], own.headers["X-Length-After"]) == ("1", "100")


def test_every_node_serves_each_seeded_ledger_and_its_entry(
        seeded: tuple[LiveCluster, list[int]]) -> None:
    cluster, ids = seeded
    for lid in _sample(ids):
        for node in cluster.nodes:
            info = httpx.get(f"{node.url}/api/v1/ledgers/{lid}", timeout=30).json()
            assert (info["state"], info["last_add_confirmed"], info["length"]) == \
                ("CLOSED", 0, len(PAYLOAD))
            page = httpx.get(f"{node.url}/api/v1/ledgers/{lid}/entries", timeout=30).json()
            assert [base64.b64decode(e["payload"]) for e in page["entries"]] == [PAYLOAD]


def test_a_create_after_seeding_takes_an_id_above_the_seeded_ones(
        seeded: tuple[LiveCluster, list[int]]) -> None:
    cluster, ids = seeded
    for node in cluster.nodes:
        created = httpx.post(f"{node.url}/api/v1/ledgers", json={"password": "pw"},
                             timeout=30)
        assert created.status_code == 201, created.text
        assert created.json()["ledger_id"] > max(ids)


def test_a_seeded_ledger_is_deleted_with_its_password_and_its_replicas_go(
        seeded: tuple[LiveCluster, list[int]]) -> None:
    cluster, ids = seeded
    lid, url = ids[len(ids) // 2], cluster.nodes[1].url
    wrong = httpx.delete(f"{url}/api/v1/ledgers/{lid}",
                         headers={"X-Ledger-Password": "not-pw"}, timeout=30)
    assert wrong.status_code == 403
    assert httpx.delete(f"{url}/api/v1/ledgers/{lid}", headers=PW,
                        timeout=30).status_code == 204
    for node in cluster.nodes:
        assert httpx.get(f"{node.url}/api/v1/ledgers/{lid}", timeout=30).status_code == 404
        until(functools.partial(_replica_gone, node, lid), 60,
              f"{node.bookie_id}'s replica deleted")
