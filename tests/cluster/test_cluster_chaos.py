"""Chaos: kill -9 random nodes (writers and plain bookies) of a real four-node cluster
under concurrent adds, and restart them (DESIGN §10 Tests, docs/cluster.md §11).

Clients append to four ledgers of different quorums through random nodes, each
retrying an unanswered add with ``?entry_id=N`` (exactly once).  Afterwards:

- every acknowledged entry reads back byte for byte from every node, and every
  entry up to the LAC is the payload its client sent for that id;
- all nodes report the same state and LAC for each ledger, never below an
  acknowledged id;
- once the ledgers are closed, re-replication brings every entry to Qw valid
  replicas, and after one node is lost for good (past ``REREPLICATION_DELAY``),
  to Qw replicas on the live ones, with the lost node replaced in the metadata.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from cluster import (
    ClusterKeys,
    EtcdClient,
    EtcdMetadataStore,
    LedgerMetadata,
    LedgerState,
    write_set,
)
from tools.local_cluster import TOKEN, LiveCluster
from tools.local_etcd import LocalEtcd

SCOPE = "chaos"
QUORUMS = ((3, 3, 2), (3, 2, 2), (3, 3, 2), (3, 2, 1))
CYCLES = 4
PW = {"X-Ledger-Password": "pw"}
AUTH = {"Authorization": f"Bearer {TOKEN}"}
# One client for the checks: each module-level httpx call builds a new client, and
# its SSL context alone took ~0.1 s here.
HTTP = httpx.Client(timeout=30)


def payload(ledger_id: int, entry_id: int) -> bytes:
    seed = hashlib.sha256(b"%d/%d" % (ledger_id, entry_id)).digest()
    return seed * (1 + seed[0] % 40)


@dataclass
class Client:
    """Appends payload(ledger, i) for i = 0, 1, … exactly once, through any node."""

    ledger_id: int
    urls: list[str]
    rng: random.Random
    acked: dict[int, bytes] = field(default_factory=dict)
    conflicts: list[str] = field(default_factory=list)
    retries: int = 0

    def run(self, stop: threading.Event) -> None:
        entry_id = 0
        with httpx.Client(timeout=10) as http:
            while not stop.is_set():
                data = payload(self.ledger_id, entry_id)
                url = self.rng.choice(self.urls)
                try:
                    response = http.post(f"{url}/api/v1/ledgers/{self.ledger_id}/entries",
                                         content=data, headers=PW,
                                         params={"entry_id": entry_id})
                except httpx.HTTPError:
                    self.retries += 1
                    time.sleep(0.05)  # a node is down: try another after a moment
                    continue
                if response.status_code in (200, 201):
                    got = response.json()["entry_id"]
                    if got != entry_id:
                        self.conflicts.append(f"#{entry_id} acknowledged as {got}")
                    self.acked[entry_id] = data
                    entry_id += 1
                    time.sleep(0.02)  # a steady pace: fewer entries to verify, same faults
                elif response.json().get("code") == "ECONFLICT":
                    self.conflicts.append(f"#{entry_id}: {response.text}")
                    return
                else:
                    self.retries += 1
                    time.sleep(0.05)


def metadata_of(etcd: LocalEtcd, ledger_id: int) -> LedgerMetadata:
    async def read() -> LedgerMetadata:
        async with EtcdClient([etcd.endpoint]) as client:
            found = await EtcdMetadataStore(client, ClusterKeys(SCOPE)).read(ledger_id)
            assert found is not None
            return found[0]
    return asyncio.run(read())


def note(text: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} chaos: {text}", flush=True)


def wait_until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if condition():
                return
        except (httpx.HTTPError, ValueError, KeyError) as exc:
            note(f"waiting for {what}: {exc!r}")
        time.sleep(0.2)  # polling other processes
    pytest.fail(f"timed out waiting for {what}")


def read_all(url: str, ledger_id: int, last: int) -> list[bytes]:
    found: list[bytes] = []
    start: int | None = 0
    while start is not None and start <= last:
        page = HTTP.get(f"{url}/api/v1/ledgers/{ledger_id}/entries", timeout=30,
                         params={"start": start, "end": last, "limit": 1000}).json()
        found += [base64.b64decode(e["payload"]) for e in page["entries"]]
        start = page["next_start"]
    return found


def held(cluster: LiveCluster, bookie: str, ledger_id: int) -> dict[int, int]:
    """entry id -> epoch of what ``bookie`` holds of the ledger (its listing, paged)."""
    found: dict[int, int] = {}
    first: int | None = 0
    while first is not None:
        doc = HTTP.get(f"{cluster.node(bookie).url}/internal/v1/ledgers/{ledger_id}/"
                        "replica/entries", params={"first": first, "limit": 10_000},
                        headers=AUTH, timeout=30).json()
        found.update((e, epoch) for e, epoch in doc["entries"])
        first = doc["next_first"]
    return found


def short_of_qw(cluster: LiveCluster, md: LedgerMetadata, live: set[str]) -> list[str]:
    """Entries of a CLOSED ledger with fewer than Qw valid replicas on ``live``
    bookies (by the bookies' listings: each replica's epoch against its fragment's)."""
    assert md.last_entry_id is not None
    listings = {b: held(cluster, b, md.ledger_id) for b in live}
    short = []
    for entry_id in range(md.last_entry_id + 1):
        fragment = md.fragment_of(entry_id)
        good = sum(1 for b in write_set(fragment, entry_id, md.write_quorum)
                   if b in live and listings[b].get(entry_id, -1) >= fragment.epoch)
        if good < md.write_quorum:
            short.append(f"L{md.ledger_id}#{entry_id}: {good}/{md.write_quorum}")
    return short


def check_replica_bytes(cluster: LiveCluster, md: LedgerMetadata, live: set[str]) -> int:
    """Every valid replica of a sample of entries (every 7th, and the last ten) holds
    its client's bytes; returns how many replicas were read."""
    assert md.last_entry_id is not None
    last = md.last_entry_id
    sample = sorted({*range(0, last + 1, 7), *range(max(0, last - 9), last + 1)})
    read = 0
    for entry_id in sample:
        fragment = md.fragment_of(entry_id)
        for bookie in write_set(fragment, entry_id, md.write_quorum):
            if bookie not in live:
                continue
            reply = HTTP.get(f"{cluster.node(bookie).url}/internal/v1/ledgers/"
                              f"{md.ledger_id}/replica/entries/{entry_id}", headers=AUTH,
                              timeout=30)
            assert reply.status_code == 200, (bookie, entry_id, reply.text)
            assert int(reply.headers["X-Epoch"]) >= fragment.epoch, (bookie, entry_id)
            assert reply.content == payload(md.ledger_id, entry_id), (bookie, entry_id)
            read += 1
    return read


@pytest.mark.slow
def test_kill_nine_random_nodes_under_concurrent_adds(local_etcd: LocalEtcd,
                                                      tmp_path: Path) -> None:
    rng = random.Random(20261125)
    with LiveCluster(tmp_path / "chaos", local_etcd.metadata_url(SCOPE), 4) as cluster:
        urls = [n.url for n in cluster.nodes]
        ledgers = []
        for i, (e, qw, qa) in enumerate(QUORUMS):
            created = HTTP.post(f"{urls[i % 4]}/api/v1/ledgers", timeout=30, json={
                "password": "pw", "ensemble_size": e, "write_quorum": qw, "ack_quorum": qa})
            assert created.status_code == 201, created.text
            ledgers.append(created.json()["ledger_id"])
        clients = [Client(lid, urls, random.Random(lid)) for lid in ledgers]
        stop = threading.Event()
        threads = [threading.Thread(target=c.run, args=(stop,)) for c in clients]
        for t in threads:
            t.start()
        kills: list[str] = []
        note("clients started")
        try:
            for cycle in range(CYCLES):
                time.sleep(rng.uniform(1.0, 2.5))
                if cycle % 2 == 0:  # a writer
                    victim = metadata_of(local_etcd, rng.choice(ledgers)).writer.node
                else:
                    victim = rng.choice([n.bookie_id for n in cluster.running])
                cluster.node(victim).kill()
                kills.append(victim)
                note(f"killed {victim}, acked so far {sum(len(c.acked) for c in clients)}")
                time.sleep(rng.uniform(0.5, 2.5))
                cluster.node(victim).start()
                note(f"restarted {victim}")
            time.sleep(2.0)
        finally:
            stop.set()
            for t in threads:
                t.join(60)
        assert not [c for c in clients if c.conflicts], [c.conflicts for c in clients]
        acked = sum(len(c.acked) for c in clients)
        assert acked > 100 and all(c.acked for c in clients), [len(c.acked) for c in clients]
        cluster.wait_members(4)
        note(f"writes stopped: {acked} acknowledged")

        # Every node: the same state and LAC, every entry up to it as its client sent it.
        for client in clients:
            lid, top = client.ledger_id, max(client.acked)

            def agreed(lid: int = lid, top: int = top) -> bool:
                views = {(d["state"], d["last_add_confirmed"]) for d in (
                    HTTP.get(f"{u}/api/v1/ledgers/{lid}", timeout=30).json() for u in urls)}
                return len(views) == 1 and views.pop()[1] >= top
            wait_until(agreed, 60, f"every node to agree on ledger {lid}")
            lac = HTTP.get(f"{urls[0]}/api/v1/ledgers/{lid}", timeout=30).json()[
                "last_add_confirmed"]
            expected = [payload(lid, i) for i in range(lac + 1)]
            for url in urls:
                assert read_all(url, lid, lac) == expected, (lid, url)
            for entry_id, data in client.acked.items():
                assert expected[entry_id] == data

        note("every node agrees and reads every entry back")
        # Closed, every entry comes back to Qw valid replicas.
        for lid in ledgers:
            fenced = HTTP.post(f"{urls[rng.randrange(4)]}/api/v1/ledgers/{lid}/fence",
                                headers=PW, timeout=60)
            assert fenced.status_code == 200 and fenced.json()["state"] == "CLOSED"
        note("every ledger closed")
        everyone = {n.bookie_id for n in cluster.nodes}
        def qw_everywhere() -> bool:
            short = [s for lid in ledgers for s in short_of_qw(
                cluster, metadata_of(local_etcd, lid), everyone)]
            if short:
                note(f"{len(short)} entries short of Qw, e.g. {short[:3]}")
            return not short
        wait_until(qw_everywhere, 120, "Qw copies of every entry")
        replicas_read = sum(check_replica_bytes(cluster, metadata_of(local_etcd, lid), everyone)
                            for lid in ledgers)

        note("Qw copies of every entry")
        # One node lost for good: past the delay its fragments move to the spare.
        # The lost node is one that holds replicas, so the repair has work to do, and
        # not the auditor: one CI run that lost the auditor saw no re-replication in
        # 180 s (not reproduced since; docs/cluster.md, "Limits of this version").
        replaceable = [lid for lid in ledgers if metadata_of(local_etcd, lid).state
                       is LedgerState.CLOSED]
        auditor = HTTP.get(f"{urls[0]}/api/v1/cluster", timeout=30).json()["auditor"]
        holders = Counter(b for lid in replaceable
                          for f in metadata_of(local_etcd, lid).ensembles for b in f.bookies
                          if b != auditor)
        lost = holders.most_common(1)[0][0]
        note(f"losing {lost} for good (the auditor is {auditor})")
        cluster.node(lost).kill()
        live = everyone - {lost}

        def repaired() -> bool:
            for lid in replaceable:
                md = metadata_of(local_etcd, lid)
                short = short_of_qw(cluster, md, live)
                if any(lost in f.bookies for f in md.ensembles) or short:
                    note(f"ledger {lid} not repaired yet: fragments "
                         f"{[(f.first_entry_id, f.bookies) for f in md.ensembles]}, "
                         f"{len(short)} entries short of Qw")
                    return False
            return True
        try:
            wait_until(repaired, 180, f"re-replication of {lost}'s replicas")
        except BaseException:
            for node in cluster.nodes:  # what the auditor did, for whoever reads the failure
                if node.bookie_id in live:
                    lines = [line for line in node.logs().splitlines() if "ledgerd.cluster" in line]
                    print(f"--- {node.bookie_id}: its log's last cluster lines", *lines[-15:],
                          sep="\n")
            raise
        for lid in replaceable:
            replicas_read += check_replica_bytes(cluster, metadata_of(local_etcd, lid), live)
        survivor = cluster.node(min(live)).url

        def members_seen() -> bool:
            view = HTTP.get(f"{survivor}/api/v1/cluster", timeout=30).json()
            return {n["bookie_id"] for n in view["nodes"]} == live
        wait_until(members_seen, 60, f"{lost} to leave the cluster view")
        print(f"chaos: {CYCLES} kill -9 cycles ({', '.join(kills)}), {acked} entries "
              f"acknowledged and verified from 4 nodes, "
              f"{sum(c.retries for c in clients)} client retries, {replicas_read} replicas read "
              "back byte for byte")
