"""Faults a live cluster must ride out (DESIGN §10 Tests, docs/cluster.md §6.6):
etcd stopped and restarted while serving, and a writer paused (SIGSTOP) past its
membership lease, on three real ``ledgerd serve`` processes."""

from __future__ import annotations

import base64
import functools
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tools.local_cluster import TOKEN, LiveCluster
from tools.local_etcd import LocalEtcd

PW = {"X-Ledger-Password": "pw"}


def add(url: str, ledger_id: int, payload: bytes, entry_id: int | None = None,
        ) -> httpx.Response:
    params = {} if entry_id is None else {"entry_id": entry_id}
    return httpx.post(f"{url}/api/v1/ledgers/{ledger_id}/entries", content=payload,
                      headers=PW, params=params, timeout=30)


def eventually(call: Callable[[], httpx.Response], ok: tuple[int, ...], timeout_s: float,
               ) -> httpx.Response:
    """``call()`` until it answers one of ``ok`` (503s and refused connections retried)."""
    deadline = time.monotonic() + timeout_s
    last: object = None
    while time.monotonic() < deadline:
        try:
            response = call()
        except httpx.HTTPError as exc:
            last = exc
        else:
            if response.status_code in ok:
                return response
            last = response.text
        time.sleep(0.2)  # waiting for another process (a lease, a takeover)
    pytest.fail(f"no answer in {ok} within {timeout_s}s: {last}")


def entries(url: str, ledger_id: int) -> list[bytes]:
    page = httpx.get(f"{url}/api/v1/ledgers/{ledger_id}/entries", params={"limit": 1000},
                     timeout=30).json()
    return [base64.b64decode(e["payload"]) for e in page["entries"]]


def test_etcd_stopped_and_restarted_while_serving(tmp_path: Path) -> None:
    """Reads go on while etcd is away; the ledger's state is not claimed then (503:
    its writer may have closed it through a node that still reached etcd, and a
    node cut from etcd alone cannot tell); once etcd is back, writes resume (the
    writer, whose lease lapsed, takes its ledgers over again) and nothing
    acknowledged is lost."""
    etcd = LocalEtcd(tmp_path / "etcd")
    etcd.start()
    try:
        with LiveCluster(tmp_path / "c", etcd.metadata_url("etcd-down"), 3) as cluster:
            urls = [n.url for n in cluster.nodes]
            lid = httpx.post(f"{urls[0]}/api/v1/ledgers", json={"password": "pw"},
                             timeout=30).json()["ledger_id"]
            sent = [b"before %d" % i for i in range(10)]
            for i, payload in enumerate(sent):
                assert add(urls[i % 3], lid, payload).status_code == 201
            etcd.stop()
            time.sleep(3.0)  # past MEMBERSHIP_TTL: every lease has lapsed meanwhile
            for url in urls:
                state = httpx.get(f"{url}/api/v1/ledgers/{lid}", timeout=30)
                assert state.status_code == 503, state.text
                read = entries(url, lid)
                # The LAC of the last add travels with the next (or the writer's
                # explicit LAC when idle): at least all but the last are readable.
                assert len(read) >= len(sent) - 1 and read == sent[:len(read)]
                one = httpx.get(f"{url}/api/v1/ledgers/{lid}/entries/3", timeout=30)
                assert one.status_code == 200 and one.content == sent[3]
            refused = add(urls[0], lid, b"while etcd is away")
            assert refused.status_code == 503, refused.text  # not acknowledged: no lease
            etcd.start()
            resumed = eventually(lambda: add(urls[1], lid, b"after", entry_id=10), (201,), 60)
            assert resumed.json()["entry_id"] == 10
            sent.append(b"after")
            for url in urls:
                info = httpx.get(f"{url}/api/v1/ledgers/{lid}", timeout=30).json()
                assert info["last_add_confirmed"] == 10
                assert entries(url, lid) == sent
    finally:
        etcd.stop()


def test_a_writer_paused_past_its_lease_acknowledges_nothing_stale(
        local_etcd: LocalEtcd, tmp_path: Path) -> None:
    """n0 writes a ledger and is stopped (SIGSTOP) past MEMBERSHIP_TTL; n1 takes the
    ledger over.  When n0 wakes, the adds it had received meanwhile are not
    acknowledged from its old writer: every acknowledged id holds the acknowledged
    bytes on every node, and the ledger goes on under its new writer."""
    with LiveCluster(tmp_path / "c", local_etcd.metadata_url("sigstop"), 3) as cluster:
        n0, n1, n2 = cluster.nodes
        lid = httpx.post(f"{n0.url}/api/v1/ledgers", json={"password": "pw"},
                         timeout=30).json()["ledger_id"]
        acked: dict[int, bytes] = {}
        refused: list[int] = []
        for i in range(5):
            assert add(n0.url, lid, b"n0 %d" % i, entry_id=i).status_code == 201
            acked[i] = b"n0 %d" % i

        # Adds that reach n0 while it stands still, answered only once it wakes.
        stalled: list[httpx.Response | Exception] = []

        def stalled_add(entry_id: int) -> None:
            try:
                stalled.append(add(n0.url, lid, b"stalled %d" % entry_id, entry_id=entry_id))
            except httpx.HTTPError as exc:
                stalled.append(exc)
        n0.pause()
        try:
            senders = [threading.Thread(target=stalled_add, args=(5,))]
            for sender in senders:
                sender.start()
            time.sleep(3.0)  # past MEMBERSHIP_TTL
            taken = eventually(lambda: add(n1.url, lid, b"n1 5", entry_id=5), (201,), 60)
            assert taken.json()["entry_id"] == 5
            acked[5] = b"n1 5"
            for i in range(6, 9):
                assert add(n2.url, lid, b"n2 %d" % i, entry_id=i).status_code == 201
                acked[i] = b"n2 %d" % i
        finally:
            n0.resume()
        for sender in senders:
            sender.join(60)
        for answer in stalled:
            if isinstance(answer, httpx.Response) and answer.status_code in (200, 201):
                # Only as the retry of an entry that holds these bytes (it cannot).
                pytest.fail(f"n0 acknowledged a stale add: {answer.text}")
            refused.append(5)
        after = eventually(lambda: add(n0.url, lid, b"n0 again", entry_id=9), (201,), 60)
        assert after.json()["entry_id"] == 9
        acked[9] = b"n0 again"
        for url in (n0.url, n1.url, n2.url):
            info = httpx.get(f"{url}/api/v1/ledgers/{lid}", timeout=30).json()
            assert (info["state"], info["last_add_confirmed"]) == ("OPEN", 9)
            assert entries(url, lid) == [acked[i] for i in range(10)]
        assert refused == [5]


def test_the_readable_end_never_moves_back_when_the_writer_goes_silent(
        local_etcd: LocalEtcd, tmp_path: Path) -> None:
    """docs/cluster.md §8.1: n0 writes 5 entries and idles, so only its explicit LAC
    tells the bookies of the last ack; then it stops (SIGSTOP).  Every answer n1 and
    n2 give meanwhile — asking the silent writer, then its bookies, then the node
    that took the ledger over — names an end of at least 4, never the 3 that the
    adds carried."""
    with LiveCluster(tmp_path / "c", local_etcd.metadata_url("end"), 3) as cluster:
        n0, n1, n2 = cluster.nodes
        lid = httpx.post(f"{n0.url}/api/v1/ledgers", json={"password": "pw"},
                         timeout=30).json()["ledger_id"]
        for i in range(5):
            assert add(n0.url, lid, b"entry %d" % i).json()["last_add_confirmed"] == i
        for node in (n1, n2):
            info = httpx.get(f"{node.url}/api/v1/ledgers/{lid}", timeout=30).json()
            assert info["last_add_confirmed"] == 4
        n0.pause()
        ends: list[int] = []
        statuses: list[int] = []
        try:
            deadline = time.monotonic() + 8.0  # past MEMBERSHIP_TTL and a takeover
            while time.monotonic() < deadline:
                for node in (n1, n2):
                    response = httpx.get(f"{node.url}/api/v1/ledgers/{lid}", timeout=30)
                    statuses.append(response.status_code)
                    if response.status_code == 200:
                        ends.append(response.json()["last_add_confirmed"])
                    else:
                        assert response.status_code == 503, response.text
                        assert "Retry-After" in response.headers
        finally:
            n0.resume()
        assert ends, f"no answer while the writer was silent: {statuses}"
        assert min(ends) == 4 and max(ends) == 4, ends
        taken = eventually(lambda: add(n1.url, lid, b"entry 5", entry_id=5), (201,), 60)
        assert taken.json()["entry_id"] == 5
        for node in (n0, n1, n2):
            info = eventually(lambda n=node: httpx.get(f"{n.url}/api/v1/ledgers/{lid}",
                                                       timeout=30), (200,), 30).json()
            assert info["last_add_confirmed"] == 5
            assert entries(node.url, lid) == [b"entry %d" % i for i in range(6)]


def test_a_wiped_bookie_is_refused_and_rejoins_as_a_new_one(
        local_etcd: LocalEtcd, tmp_path: Path) -> None:
    """docs/cluster.md §13.1: n2's data directory (journal included) is wiped while it
    is down; restarted under its old BOOKIE_ID it refuses to serve and says why.  n2
    cannot be decommissioned while registered; once decommissioned, its replicas are
    re-replicated to a new bookie n3 at once, and the ledger reads whole."""
    with LiveCluster(tmp_path / "c", local_etcd.metadata_url("wipe"), 3) as cluster:
        n0, n1, n2 = cluster.nodes
        lid = httpx.post(f"{n0.url}/api/v1/ledgers", json={"password": "pw"},
                         timeout=30).json()["ledger_id"]
        payloads = [b"kept %d" % i for i in range(5)]
        for payload in payloads:
            assert add(n0.url, lid, payload).status_code == 201
        decommission = f"{n0.url}/api/v1/cluster/bookies/n2/decommission"
        refused = httpx.post(decommission, timeout=30)
        assert refused.status_code == 409, refused.text  # n2 is registered
        n2.stop()
        shutil.rmtree(n2.data_dir)
        n2.spawn()
        assert n2.process is not None
        assert n2.process.wait(timeout=120) != 0
        assert n2.log_path is not None
        log = n2.log_path.read_text(errors="replace")
        assert "refusing to serve" in log and "was wiped or replaced" in log
        assert httpx.post(decommission, timeout=30).json() == {"bookie_id": "n2"}
        view = httpx.get(f"{n1.url}/api/v1/cluster", timeout=30).json()
        assert view["decommissioned"] == ["n2"]
        cluster.nodes.remove(n2)
        n3 = cluster.add_node("n3")
        # Closing settles the fragment that names n2: the auditor copies it (an open
        # ledger's last fragment is its writer's to mend, at its next add).
        closed = httpx.post(f"{n0.url}/api/v1/ledgers/{lid}/close", headers=PW, timeout=30)
        assert closed.json()["last_add_confirmed"] == 4, closed.text
        replica = f"{n3.url}/internal/v1/ledgers/{lid}/replica/entries"
        auth = {"Authorization": f"Bearer {TOKEN}"}
        for entry_id, payload in enumerate(payloads):
            copied = eventually(lambda e=entry_id: httpx.get(f"{replica}/{e}", headers=auth,
                                                             timeout=30), (200,), 60)
            assert copied.content == payload
        for node in (n0, n1, n3):
            assert entries(node.url, lid) == payloads


def test_an_idle_open_ledger_naming_a_dead_bookie_is_closed_and_re_replicated(
        local_etcd: LocalEtcd, tmp_path: Path) -> None:
    """docs/cluster.md §9: an OPEN ledger whose last ensemble names a bookie gone longer
    than OPEN_LEDGER_REREPLICATION_GRACE_PERIOD, and which received no add, is fenced
    and closed by the auditor at its LAC; its fragment is then settled and copied to
    the spare bookie (without this its writer, which mends a dead bookie only when an
    add meets it, left it under-replicated for ever)."""
    settings = {"OPEN_LEDGER_REREPLICATION_GRACE_PERIOD": "1"}
    with LiveCluster(tmp_path / "c", local_etcd.metadata_url("idle-open"), 4,
                     settings=settings) as cluster:
        # The writer is not the auditor: the auditor asks it to close (fenced behind
        # its back it would go on answering OPEN).
        view = f"{cluster.nodes[0].url}/api/v1/cluster"
        deadline = time.monotonic() + 30
        while (auditor := httpx.get(view, timeout=30).json()["auditor"]) is None \
                and time.monotonic() < deadline:
            time.sleep(0.2)  # the first election, in another process
        assert auditor is not None
        n0 = next(n for n in cluster.nodes if n.bookie_id != auditor)
        made = httpx.post(f"{n0.url}/api/v1/ledgers", timeout=30, json={
            "password": "pw", "ensemble_size": 3, "write_quorum": 3, "ack_quorum": 2})
        lid = made.json()["ledger_id"]
        payloads = [b"idle %d" % i for i in range(5)]
        for payload in payloads:
            assert add(n0.url, lid, payload).status_code == 201
        placement = f"{n0.url}/api/v1/cluster/ledgers/{lid}"
        ensemble = httpx.get(placement, timeout=30).json()["fragments"][-1]["bookies"]
        victim = sorted(set(ensemble) - {n0.bookie_id, auditor})[0]
        spare = ({n.bookie_id for n in cluster.nodes} - set(ensemble)).pop()
        cluster.node(victim).kill()

        closed = eventually(lambda: httpx.get(f"{n0.url}/api/v1/ledgers/{lid}", timeout=30),
                            (200,), 30)
        deadline = time.monotonic() + 30
        while closed.json()["state"] != "CLOSED" and time.monotonic() < deadline:
            time.sleep(0.2)  # waiting for the auditor of another process
            closed = httpx.get(f"{n0.url}/api/v1/ledgers/{lid}", timeout=30)
        assert closed.json()["state"] == "CLOSED", closed.text
        assert closed.json()["last_add_confirmed"] == 4
        replica = f"{cluster.node(spare).url}/internal/v1/ledgers/{lid}/replica/entries"
        auth = {"Authorization": f"Bearer {TOKEN}"}
        for entry_id, payload in enumerate(payloads):
            copied = eventually(functools.partial(httpx.get, f"{replica}/{entry_id}",
                                                  headers=auth, timeout=30), (200,), 30)
            assert copied.content == payload
        fragments = eventually(lambda: httpx.get(placement, timeout=30), (200,), 30)
        deadline = time.monotonic() + 30
        while victim in fragments.json()["fragments"][-1]["bookies"] \
                and time.monotonic() < deadline:
            time.sleep(0.2)  # the copies are done; the auditor's CAS follows
            fragments = httpx.get(placement, timeout=30)
        assert fragments.json()["fragments"][-1]["bookies"] == [
            spare if b == victim else b for b in ensemble]
        for node in cluster.running:
            assert entries(node.url, lid) == payloads
            info = httpx.get(f"{node.url}/api/v1/ledgers/{lid}", timeout=30).json()
            assert (info["state"], info["last_add_confirmed"]) == ("CLOSED", 4)
