"""Cluster mode over TLS (issue 14 item 3, issue 16): three ``ledgerd serve`` nodes on
loopback serving HTTPS with one certificate (IP SAN 127.0.0.1) signed by a CA made at
test time, TLS_CA_FILE naming that CA, on a real etcd (plain HTTP on loopback).

Node-to-node calls (replica adds and reads, forwarding to the writer) go to each
peer's advertised ``https://`` URL and verify its certificate; a node whose
TLS_CA_FILE does not hold the CA that signed its peers' certificates reaches none
of them."""

from __future__ import annotations

import asyncio
import base64
import ssl
import time
from collections.abc import Iterator

import httpx
import pytest

from cluster import ClusterSettings, EntriesHeld, HttpBookieClient, ListEntries, peer_ssl_context
from common.settings import default_of
from tools.local_cluster import TOKEN, LiveCluster
from tools.local_etcd import LocalEtcd
from tools.local_pki import Pki, make_pki

PW = {"X-Ledger-Password": "pw"}
ADD_TIMEOUT_S: float = default_of(ClusterSettings, "add_timeout_s")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def cluster(local_etcd: LocalEtcd, pki: Pki, tmp_path_factory: pytest.TempPathFactory,
            ) -> Iterator[LiveCluster]:
    settings = {"TLS_CERT_FILE": pki.cert, "TLS_KEY_FILE": pki.key, "TLS_CA_FILE": pki.ca}
    with LiveCluster(tmp_path_factory.mktemp("cluster-tls"), local_etcd.metadata_url("tls"),
                     3, settings=settings, ca_file=pki.ca) as live:
        yield live


@pytest.fixture()
def client(pki: Pki) -> Iterator[httpx.Client]:
    with httpx.Client(verify=ssl.create_default_context(cafile=str(pki.ca)),
                      timeout=30) as trusted:
        yield trusted


def create(client: httpx.Client, url: str) -> int:
    response = client.post(f"{url}/api/v1/ledgers", json={
        "password": "pw", "ensemble_size": 3, "write_quorum": 3, "ack_quorum": 2})
    assert response.status_code == 201, response.text
    return int(response.json()["ledger_id"])


def held_by(pki: Pki, url: str, ledger_id: int) -> tuple[tuple[int, int], ...]:
    """(entry id, epoch) of each entry ``url``'s replica of the ledger holds, asked
    over the internal API as a peer would (HTTPS, TLS_CA_FILE's trust)."""
    async def ask() -> EntriesHeld:
        bookies = HttpBookieClient(lambda b: url, token=TOKEN,
                                   ssl_context=peer_ssl_context(pki.ca))
        try:
            reply = await bookies.call("any", ListEntries(ledger_id, 0, 1_000))
        finally:
            await bookies.aclose()
        assert isinstance(reply, EntriesHeld), reply
        return reply.entries
    return asyncio.run(ask())


def test_nodes_replicate_and_forward_over_https(cluster: LiveCluster, pki: Pki,
                                                client: httpx.Client) -> None:
    n0, n1, n2 = cluster.nodes
    view = client.get(f"{n1.url}/api/v1/cluster").json()
    assert sorted(n["url"] for n in view["nodes"]) == sorted(n.url for n in cluster.nodes)
    assert all(n.url.startswith("https://127.0.0.1:") for n in cluster.nodes)
    lid = create(client, n0.url)  # n0 writes it
    payloads = [bytes([i]) * (100 * i + 1) + b"\x00\xff" for i in range(10)]
    for i, payload in enumerate(payloads):
        via = n1 if i % 2 else n0  # odd ones are forwarded by n1 to the writer
        added = client.post(f"{via.url}/api/v1/ledgers/{lid}/entries", content=payload,
                            headers=PW)
        assert added.status_code == 201, added.text
        assert added.json()["entry_id"] == i
    batch = [b"batch one", b"\x00" * 5000]
    added = client.post(f"{n2.url}/api/v1/ledgers/{lid}/entries/batch", headers=PW,
                        json={"entries": [base64.b64encode(p).decode() for p in batch]})
    assert added.status_code == 201, added.text
    assert (added.json()["first_entry_id"], added.json()["last_entry_id"]) == (10, 11)
    payloads += batch
    for node in cluster.nodes:
        page = client.get(f"{node.url}/api/v1/ledgers/{lid}/entries").json()
        assert [base64.b64decode(e["payload"]) for e in page["entries"]] == payloads
        for entry_id in (0, 7, 11):
            one = client.get(f"{node.url}/api/v1/ledgers/{lid}/entries/{entry_id}")
            assert one.content == payloads[entry_id]
    # Qw = 3: every node's replica receives every entry (the third may land just
    # after the client's ack, at Qa = 2).
    every = tuple((i, 1) for i in range(len(payloads)))
    deadline = time.monotonic() + 10
    held = [held_by(pki, n.url, lid) for n in cluster.nodes]
    while held != [every] * 3 and time.monotonic() < deadline:
        time.sleep(0.05)  # polling the replicas of other processes
        held = [held_by(pki, n.url, lid) for n in cluster.nodes]
    assert held == [every] * 3


def test_a_node_that_does_not_trust_its_peers_certificates_cannot_replicate(
        cluster: LiveCluster, pki: Pki, client: httpx.Client,
        tmp_path_factory: pytest.TempPathFactory) -> None:
    other_ca = make_pki(tmp_path_factory.mktemp("other-pki"), "other").ca
    # n3 presents the same certificate, which the others trust; it trusts only a CA
    # that signed none of theirs.  Its membership goes through etcd (plain HTTP).
    # It holds the cluster's password key already (a node whose TLS_CA_FILE went
    # wrong after it joined): a new node would not start without fetching it.
    seed = cluster.root / "n3" / "cluster-password.key"
    seed.parent.mkdir(parents=True, exist_ok=True)
    seed.write_bytes((cluster.nodes[0].data_dir / "cluster-password.key").read_bytes())
    n3 = cluster.add_node("n3", settings={"TLS_CA_FILE": other_ca})
    try:
        n0 = cluster.nodes[0]
        lid = create(client, n0.url)
        forwarded = client.post(f"{n3.url}/api/v1/ledgers/{lid}/entries", content=b"x",
                                headers=PW)
        assert forwarded.status_code == 503, forwarded.text
        assert forwarded.json()["code"] == "EIO"  # the detail is in n3's log:
        assert f"the writer of ledger {lid} did not answer: {n0.url}" in n3.logs()
        assert "CERTIFICATE_VERIFY_FAILED" in n3.logs()

        # n3 writes this one: its adds reach no other bookie, so never Qa = 2.  The
        # add is waited for twice the add timeout, past which the writer has given
        # up on the bookies that did not answer and tried their replacements.
        mine = create(client, n3.url)
        with pytest.raises(httpx.ReadTimeout):
            client.post(f"{n3.url}/api/v1/ledgers/{mine}/entries", content=b"lonely",
                        headers=PW, timeout=2 * ADD_TIMEOUT_S)
        seen = client.get(f"{n0.url}/api/v1/ledgers/{mine}").json()  # n0 asks n3
        assert (seen["last_add_confirmed"], seen["entries"]) == (-1, 0)
        for node in cluster.nodes[:3]:
            assert held_by(pki, node.url, mine) == ()
        # The others still reach n3 and each other: n0's ledger takes adds.
        ok = client.post(f"{n0.url}/api/v1/ledgers/{lid}/entries", content=b"y", headers=PW)
        assert ok.status_code == 201, ok.text
    finally:
        n3.kill()
