"""Cluster mode through the v1 API of real ``ledgerd serve`` processes: three nodes on
loopback, each with its own data dir and journal, on a real etcd (DESIGN §10)."""

from __future__ import annotations

import asyncio
import base64
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from cluster import ClusterKeys, EtcdClient, EtcdMetadataStore, LedgerMetadata, write_set
from tests.app.conftest import CLIENT_DIR
from tools.local_cluster import TOKEN, ClusterNodeProcess, LiveCluster
from tools.local_etcd import LocalEtcd

PW = {"X-Ledger-Password": "pw"}
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cluster(local_etcd: LocalEtcd, tmp_path_factory: pytest.TempPathFactory,
            ) -> Iterator[LiveCluster]:
    with LiveCluster(tmp_path_factory.mktemp("cluster-api"), local_etcd.metadata_url("api"),
                     3) as live:
        yield live


def metadata(etcd: LocalEtcd, scope: str, ledger_id: int) -> LedgerMetadata:
    async def read() -> LedgerMetadata:
        async with EtcdClient([etcd.endpoint]) as client:
            found = await EtcdMetadataStore(client, ClusterKeys(scope)).read(ledger_id)
            assert found is not None
            return found[0]
    return asyncio.run(read())


def create(url: str, **body: Any) -> dict[str, Any]:
    response = httpx.post(f"{url}/api/v1/ledgers", json={"password": "pw", **body}, timeout=30)
    assert response.status_code == 201, response.text
    return dict(response.json())


def add(url: str, ledger_id: int, payload: bytes, **params: int) -> httpx.Response:
    return httpx.post(f"{url}/api/v1/ledgers/{ledger_id}/entries", content=payload,
                      headers=PW, params=params, timeout=30)


def test_adds_through_any_node_replicate_and_read_back_everywhere(
        cluster: LiveCluster, local_etcd: LocalEtcd) -> None:
    urls = [n.url for n in cluster.nodes]
    ledger = create(urls[0], ensemble_size=3, write_quorum=3, ack_quorum=2,
                    metadata={"k": "v"})
    lid = ledger["ledger_id"]
    payloads = [f"entry {i}".encode() * (i + 1) for i in range(12)]
    for i, payload in enumerate(payloads):
        response = add(urls[i % 3], lid, payload)  # two of three calls are forwarded
        assert response.status_code == 201, response.text
        assert response.json()["entry_id"] == i
    batch = httpx.post(f"{urls[1]}/api/v1/ledgers/{lid}/entries/batch", headers=PW,
                       json={"entries": [base64.b64encode(b"b1").decode(),
                                         base64.b64encode(b"b2").decode()]}, timeout=30)
    assert batch.status_code == 201, batch.text
    assert batch.json() == {"first_entry_id": 12, "last_entry_id": 13, "last_add_confirmed": 13}
    payloads += [b"b1", b"b2"]
    for url in urls:
        info = httpx.get(f"{url}/api/v1/ledgers/{lid}", timeout=30).json()
        assert (info["state"], info["last_add_confirmed"], info["length"]) == (
            "OPEN", 13, sum(map(len, payloads)))
        assert info["metadata"] == {"k": "v"}
        page = httpx.get(f"{url}/api/v1/ledgers/{lid}/entries", timeout=30).json()
        assert [base64.b64decode(e["payload"]) for e in page["entries"]] == payloads
        one = httpx.get(f"{url}/api/v1/ledgers/{lid}/entries/5", timeout=30)
        assert one.content == payloads[5] and one.headers["X-Last-Add-Confirmed"] == "13"
        assert httpx.get(f"{url}/api/v1/ledgers/{lid}/entries/14",
                         timeout=30).status_code == 404  # never past the LAC
    md = metadata(local_etcd, "api", lid)
    assert (md.ensemble_size, md.write_quorum, md.ack_quorum) == (3, 3, 2)
    assert md.writer.node == "n0" and md.writer.epoch == 1
    assert set(md.ensembles[0].bookies) == {"n0", "n1", "n2"}


def test_exactly_once_with_entry_id(cluster: LiveCluster) -> None:
    urls = [n.url for n in cluster.nodes]
    lid = create(urls[1])["ledger_id"]
    assert add(urls[0], lid, b"zero", entry_id=0).status_code == 201
    again = add(urls[2], lid, b"zero", entry_id=0)  # a retry through another node
    assert again.status_code == 200 and again.json()["entry_id"] == 0
    assert add(urls[2], lid, b"other", entry_id=0).status_code == 409
    assert add(urls[0], lid, b"two", entry_id=2).status_code == 409  # not the next id
    assert add(urls[0], lid, b"one", entry_id=1).status_code == 201


def test_fence_recovers_and_closes_and_every_node_says_closed(cluster: LiveCluster) -> None:
    urls = [n.url for n in cluster.nodes]
    lid = create(urls[2])["ledger_id"]
    for i in range(3):
        assert add(urls[i], lid, b"x%d" % i).status_code == 201
    fenced = httpx.post(f"{urls[0]}/api/v1/ledgers/{lid}/fence", headers=PW, timeout=30)
    assert fenced.status_code == 200, fenced.text
    assert (fenced.json()["state"], fenced.json()["last_add_confirmed"]) == ("CLOSED", 2)
    for url in urls:
        info = httpx.get(f"{url}/api/v1/ledgers/{lid}", timeout=30).json()
        assert (info["state"], info["last_add_confirmed"], info["length"]) == ("CLOSED", 2, 6)
        assert info["closed_at"] > info["created_at"] - 1
    refused = add(urls[1], lid, b"late")
    assert refused.status_code == 409 and refused.json()["code"] == "ECLOSED"
    closed = httpx.post(f"{urls[1]}/api/v1/ledgers/{lid}/close", headers=PW, timeout=30)
    assert closed.status_code == 200 and closed.json()["state"] == "CLOSED"
    listed = httpx.get(f"{urls[1]}/api/v1/ledgers", params={"state": "CLOSED"},
                       timeout=30).json()["ledgers"]
    assert lid in [led["ledger_id"] for led in listed]


def test_striping_puts_each_entry_on_its_write_set_only(cluster: LiveCluster,
                                                        local_etcd: LocalEtcd) -> None:
    urls = [n.url for n in cluster.nodes]
    lid = create(urls[0], ensemble_size=3, write_quorum=2, ack_quorum=2)["ledger_id"]
    for i in range(6):
        assert add(urls[0], lid, b"s%d" % i).status_code == 201
    md = metadata(local_etcd, "api", lid)
    for node in cluster.nodes:
        held = httpx.get(f"{node.url}/internal/v1/ledgers/{lid}/replica/entries",
                         headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30).json()
        ids = [e for e, _ in held["entries"]]
        assert ids == [e for e in range(6)
                       if node.bookie_id in write_set(md.ensembles[0], e, 2)]
    for url in urls:
        page = httpx.get(f"{url}/api/v1/ledgers/{lid}/entries", timeout=30).json()
        assert [base64.b64decode(e["payload"]) for e in page["entries"]] == [
            b"s%d" % i for i in range(6)]


def test_quorums_are_checked(cluster: LiveCluster) -> None:
    url = cluster.nodes[0].url
    too_many = httpx.post(f"{url}/api/v1/ledgers", json={"ensemble_size": 4}, timeout=30)
    assert too_many.status_code == 503 and "Retry-After" in too_many.headers
    for bad in ({"ensemble_size": 2, "write_quorum": 3}, {"write_quorum": 1, "ack_quorum": 2}):
        assert httpx.post(f"{url}/api/v1/ledgers", json=bad, timeout=30).status_code == 400


def test_passwords_are_checked_against_the_metadata(cluster: LiveCluster) -> None:
    urls = [n.url for n in cluster.nodes]
    lid = create(urls[0])["ledger_id"]
    for url in urls:
        wrong = httpx.post(f"{url}/api/v1/ledgers/{lid}/entries", content=b"x",
                           headers={"X-Ledger-Password": "nope"}, timeout=30)
        assert wrong.status_code == 403 and wrong.json()["code"] == "EUA"


def test_delete_removes_the_metadata_then_every_replica(cluster: LiveCluster) -> None:
    urls = [n.url for n in cluster.nodes]
    lid = create(urls[0])["ledger_id"]
    assert add(urls[0], lid, b"doomed").status_code == 201
    deleted = httpx.delete(f"{urls[1]}/api/v1/ledgers/{lid}", headers=PW, timeout=30)
    assert deleted.status_code == 204
    for url in urls:
        assert httpx.get(f"{url}/api/v1/ledgers/{lid}", timeout=30).status_code == 404
    auth = {"Authorization": f"Bearer {TOKEN}"}
    for node in cluster.nodes:
        held = _wait_for(lambda n=node: httpx.get(
            f"{n.url}/internal/v1/ledgers/{lid}/replica/entries", headers=auth,
            timeout=30).json()["entries"] == [])
        assert held


def test_the_cluster_view(cluster: LiveCluster) -> None:
    doc = httpx.get(f"{cluster.nodes[1].url}/api/v1/cluster", timeout=30).json()
    assert set(doc) == {"nodes", "under_replicated", "auditor", "decommissioned"}
    assert [n["bookie_id"] for n in doc["nodes"]] == ["n0", "n1", "n2"]
    # One of them is elected at once (AUDIT_INTERVAL paces audits, not the election).
    assert _wait_for(lambda: httpx.get(f"{cluster.nodes[1].url}/api/v1/cluster",
                                       timeout=30).json()["auditor"] in {"n0", "n1", "n2"})
    for node in doc["nodes"]:
        assert set(node) == {"bookie_id", "url", "state", "disk_usage"}
        assert node["state"] == "writable" and 0 <= node["disk_usage"] <= 1
        assert node["url"] == cluster.node(node["bookie_id"]).url
    assert doc["under_replicated"] == []


def test_the_generated_client_against_a_cluster_node(cluster: LiveCluster) -> None:
    if str(CLIENT_DIR) not in sys.path:
        sys.path.insert(0, str(CLIENT_DIR))
    from ledgerd_client import Client
    from ledgerd_client.api.ledgers import create_ledger, get_ledger, read_entry
    from ledgerd_client.models import CreateLedger

    client = Client(base_url=cluster.nodes[2].url)
    made = create_ledger.sync(client=client, body=CreateLedger(
        password="pw", ensemble_size=3, write_quorum=2, ack_quorum=2))
    assert made is not None and made.state.value == "OPEN"
    assert add(cluster.nodes[0].url, made.ledger_id, b"via the client").status_code == 201
    info = get_ledger.sync(made.ledger_id, client=client)
    assert info is not None and info.last_add_confirmed == 0
    entry = read_entry.sync_detailed(made.ledger_id, 0, client=client)
    assert entry.content == b"via the client"


def seed_password_key(cluster: LiveCluster, node: ClusterNodeProcess) -> None:
    """Give ``node`` the cluster's password key file before its first start."""
    from node._cluster_password_key import KEY_FILE_NAME

    node.data_dir.mkdir(parents=True, exist_ok=True)
    path = node.data_dir / KEY_FILE_NAME
    path.write_bytes((cluster.nodes[0].data_dir / KEY_FILE_NAME).read_bytes())
    path.chmod(0o600)


def test_a_node_with_the_wrong_cluster_token_gets_nowhere(cluster: LiveCluster,
                                                          local_etcd: LocalEtcd) -> None:
    lid = create(cluster.nodes[0].url)["ledger_id"]
    stranger = ClusterNodeProcess(cluster.root, "stranger", cluster.metadata_url,
                                  token="not-the-token")
    # It holds the cluster's password key (copied, as an operator could): without
    # it, it would not start at all (tests/cluster/test_password_key.py).
    seed_password_key(cluster, stranger)
    stranger.start()
    try:
        # It may not write through the writer (its forwarded call is refused) …
        response = add(stranger.url, lid, b"intruder")
        assert response.status_code == 503, response.text
        # … nor may the others' calls reach it, nor its calls reach them.
        refused = httpx.get(f"{stranger.url}/internal/v1/ledgers/{lid}/replica/lac",
                            headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
        assert refused.status_code == 401
    finally:
        stranger.stop()
    info = httpx.get(f"{cluster.nodes[0].url}/api/v1/ledgers/{lid}", timeout=30).json()
    assert info["last_add_confirmed"] == -1


@pytest.mark.parametrize(("env", "named"), [
    ({"LEDGERD_METADATA_URL": "etcd://127.0.0.1:2379/x"}, "CLUSTER_TOKEN"),
    ({"LEDGERD_METADATA_URL": "zk://127.0.0.1:2181/x", "LEDGERD_CLUSTER_TOKEN": "t"},
     "METADATA_URL"),
    # Peers would call https:// a node that serves plain HTTP (no TLS_CERT_FILE).
    ({"LEDGERD_METADATA_URL": "etcd://127.0.0.1:2379/x", "LEDGERD_CLUSTER_TOKEN": "t",
      "LEDGERD_ADVERTISED_URL": "https://127.0.0.1:8443"}, "ADVERTISED_URL"),
])
def test_a_misconfigured_node_refuses_to_start_naming_the_setting(
        tmp_path: Path, env: dict[str, str], named: str) -> None:
    import os

    clean = {k: v for k, v in os.environ.items() if not k.startswith("LEDGERD_")}
    done = subprocess.run([sys.executable, "-m", "cli", "serve", "--port", "0"],
                          env={**clean, **env, "LEDGERD_DATA_DIR": str(tmp_path),
                               "PYTHONPATH": str(REPO)},
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert named in done.stderr


def _wait_for(condition: Any, timeout_s: float = 30.0) -> bool:
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)  # polling other processes
    return False


def test_append_streams_replicate_through_any_node(cluster: LiveCluster) -> None:
    """DESIGN §5a on a cluster: messages sent to the writer are pipelined, those sent
    to another node are forwarded one by one; both land in order, each exactly
    once, and read back from every node."""
    from streaming import AppendStream

    urls = [n.url for n in cluster.nodes]
    lid = create(urls[0])["ledger_id"]

    async def send(url: str, prefix: bytes, messages: int) -> list[tuple[int, int]]:
        async with await AppendStream.open(url, lid, password="pw") as stream:
            acked = await asyncio.gather(*[
                await stream.send([prefix + b"%d.%d" % (m, i) for i in range(3)])
                for m in range(messages)])
        return [(a.first_entry_id, a.last_entry_id) for a in acked]
    through_writer = asyncio.run(send(urls[0], b"w", 20))
    through_other = asyncio.run(send(urls[1], b"o", 5))
    assert through_writer == [(3 * m, 3 * m + 2) for m in range(20)]
    assert through_other == [(60 + 3 * m, 62 + 3 * m) for m in range(5)]
    expected = [b"w%d.%d" % (m, i) for m in range(20) for i in range(3)] + [
        b"o%d.%d" % (m, i) for m in range(5) for i in range(3)]
    for url in urls:
        page = httpx.get(f"{url}/api/v1/ledgers/{lid}/entries", timeout=30).json()
        assert [base64.b64decode(e["payload"]) for e in page["entries"]] == expected


def test_a_stream_run_mixing_retries_with_new_batches_lands_each_entry_once(
        cluster: LiveCluster) -> None:
    """Messages read together run together on the writer: new batches leave as one
    call per bookie; a run holding a retry (first_entry_id below the next id) goes
    batch by batch, the retry answered from what is there; a message whose first id
    is past the next one is refused at its own seq, after the others are acked."""
    from streaming import encode_batch
    from tests.streaming._wire import raw_stream, read_until

    url = cluster.nodes[0].url
    lid = create(url)["ledger_id"]
    ws = url.replace("http://", "ws://") + f"/api/v1/ledgers/{lid}/entries/stream"

    async def go() -> tuple[list[tuple[int, int, int]], Any]:
        async with raw_stream(ws, password="pw") as connection:
            for payloads, first in (([b"a0", b"a1"], None), ([b"b0"], 2), ([b"c0"], 3),
                                    ([b"a0", b"a1"], 0), ([b"d0", b"d1"], 4),
                                    ([b"late"], 9)):
                await connection.send(encode_batch(payloads, first))
            transcript = await read_until(connection)
        return transcript.acked, transcript.failure
    acked, failure = asyncio.run(go())
    assert acked == [(0, 0, 1), (1, 2, 2), (2, 3, 3), (3, 0, 1), (4, 4, 5)], failure
    assert failure is not None and failure.seq == 5
    assert failure.problem["code"] == "ECONFLICT", failure.problem
    page = httpx.get(f"{cluster.nodes[2].url}/api/v1/ledgers/{lid}/entries",
                     timeout=30).json()
    assert [base64.b64decode(e["payload"]) for e in page["entries"]] == [
        b"a0", b"a1", b"b0", b"c0", b"d0", b"d1"]


def test_a_batch_retried_with_first_entry_id_lands_once(cluster: LiveCluster) -> None:
    urls = [n.url for n in cluster.nodes]
    lid = create(urls[0])["ledger_id"]
    body = {"entries": [base64.b64encode(b"one").decode(), base64.b64encode(b"two").decode()]}
    first = httpx.post(f"{urls[1]}/api/v1/ledgers/{lid}/entries/batch", json=body, headers=PW,
                       params={"first_entry_id": 0}, timeout=30)
    assert first.status_code == 201, first.text
    again = httpx.post(f"{urls[2]}/api/v1/ledgers/{lid}/entries/batch", json=body,
                       headers=PW, params={"first_entry_id": 0}, timeout=30)
    assert again.status_code == 200 and again.json()["last_entry_id"] == 1
    other = {"entries": [base64.b64encode(b"one").decode(), base64.b64encode(b"2").decode()]}
    assert httpx.post(f"{urls[0]}/api/v1/ledgers/{lid}/entries/batch", json=other,
                      headers=PW, params={"first_entry_id": 0},
                      timeout=30).status_code == 409
    assert httpx.get(f"{urls[2]}/api/v1/ledgers/{lid}", timeout=30).json()[
        "last_add_confirmed"] == 1


def test_a_ledger_placement_and_the_filtered_listing(cluster: LiveCluster) -> None:
    urls = [n.url for n in cluster.nodes]
    ledger = create(urls[0], ensemble_size=3, write_quorum=2, ack_quorum=2,
                    metadata={"console": "placement"})
    lid = ledger["ledger_id"]
    other = create(urls[0], metadata={"console": "other"})["ledger_id"]
    assert add(urls[0], lid, b"x").status_code == 201
    doc = httpx.get(f"{urls[2]}/api/v1/cluster/ledgers/{lid}", timeout=30).json()
    assert doc["ledger_id"] == lid and doc["state"] == "OPEN"
    assert (doc["ensemble_size"], doc["write_quorum"], doc["ack_quorum"]) == (3, 2, 2)
    assert doc["writer"] == "n0" and doc["epoch"] >= 1
    assert [f["first_entry_id"] for f in doc["fragments"]] == [0]
    assert sorted(doc["fragments"][0]["bookies"]) == ["n0", "n1", "n2"]
    assert doc["fragments"][0]["epoch"] <= doc["epoch"]
    missing = httpx.get(f"{urls[2]}/api/v1/cluster/ledgers/{2**62}", timeout=30)
    assert missing.status_code == 404 and missing.json()["code"] == "ENOLEDGER"
    listed = httpx.get(f"{urls[1]}/api/v1/ledgers", timeout=30,
                       params={"metadata": "console=placement", "limit": 1000}).json()
    assert [item["ledger_id"] for item in listed["ledgers"]] == [lid]
    assert listed["next_after"] is None
    none = httpx.get(f"{urls[1]}/api/v1/ledgers", timeout=30,
                     params={"metadata": "console=other", "offload_state": "FAILED"}).json()
    assert none["ledgers"] == [] and other not in [i["ledger_id"] for i in none["ledgers"]]


def _replica_calls(url: str, part: str = "/replica/entries/") -> dict[str, float]:
    """This node's count of calls served whose route holds ``part`` (replica adds by
    default), by route (its /metrics)."""
    counts: dict[str, float] = {}
    for line in httpx.get(f"{url}/metrics", timeout=30).text.splitlines():
        if line.startswith("ledgerd_http_requests_total{") and part in line:
            route = line.split('route="', 1)[1].split('"', 1)[0]
            counts[route] = counts.get(route, 0.0) + float(line.rsplit(" ", 1)[1])
    return counts


def test_a_batch_goes_to_each_bookie_as_one_call(cluster: LiveCluster) -> None:
    """docs/cluster.md §13 "Batches and streams": a client's batch of 64 entries
    reaches each other bookie of the write set as one replica batch call (one journal
    record there), not one call per entry; the writer's own bookie is called
    without HTTP."""
    n0, n1, n2 = cluster.nodes
    lid = create(n0.url, ensemble_size=3, write_quorum=3, ack_quorum=2)["ledger_id"]
    assert add(n0.url, lid, b"first").status_code == 201   # connections made
    before = [_replica_calls(n.url) for n in (n1, n2)]
    frames = b"".join(len(p).to_bytes(4, "big") + p for p in (b"e%d" % i for i in range(64)))
    batch = httpx.post(f"{n0.url}/api/v1/ledgers/{lid}/entries/batch", content=frames,
                       headers={**PW, "Content-Type": "application/x-ledgerd-frames"},
                       timeout=30)
    assert batch.status_code == 201 and batch.json()["last_entry_id"] == 64, batch.text
    batch_route = "/internal/v1/ledgers/{ledger_id}/replica/entries/batch"
    single_route = "/internal/v1/ledgers/{ledger_id}/replica/entries/{entry_id}"
    for node, was in zip((n1, n2), before, strict=True):
        now = _replica_calls(node.url)
        assert now.get(batch_route, 0) - was.get(batch_route, 0) == 1, (node.bookie_id, now)
        assert now.get(single_route, 0) == was.get(single_route, 0), (node.bookie_id, now)


def test_concurrent_single_adds_through_another_node_are_forwarded_together(
        cluster: LiveCluster) -> None:
    """A node that is not the writer forwards single adds as a group commit does:
    while a call is in flight the next adds wait and go as one batch call, each
    answered with its own entry id, every id once; an add with ?entry_id goes
    alone and is answered as the retry it is."""
    n0, n1, _n2 = cluster.nodes
    lid = create(n0.url)["ledger_id"]
    before = sum(_replica_calls(n0.url, "/forward/entries").values())

    async def adds() -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=60) as client:
            return await asyncio.gather(*[
                client.post(f"{n1.url}/api/v1/ledgers/{lid}/entries", headers=PW,
                            content=b"f%d" % i) for i in range(48)])
    responses = asyncio.run(adds())
    assert all(r.status_code == 201 for r in responses), [r.text for r in responses]
    ids = {r.json()["entry_id"]: int(r.request.content[1:]) for r in responses}
    assert sorted(ids) == list(range(48))
    calls = sum(_replica_calls(n0.url, "/forward/entries").values()) - before
    assert 1 <= calls < 48, calls
    retry = add(n1.url, lid, b"f%d" % ids[7], entry_id=7)
    assert retry.status_code == 200 and retry.json()["entry_id"] == 7
    page = httpx.get(f"{n0.url}/api/v1/ledgers/{lid}/entries", timeout=30).json()
    assert [base64.b64decode(e["payload"]) for e in page["entries"]] == [
        b"f%d" % ids[i] for i in range(48)]
