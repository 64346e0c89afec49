"""A live ``ledgerd serve`` on a powercut mount, its workload and its verifier.

The appenders and the per-ledger verifier are the SIGKILL test's
(``tests/crash/http_workload.py``); this module adds what a power-loss history
needs beyond them: ledger creates, closes and deletes (``churn``), forced GC,
and a verifier for ledger states and for reads of ids never acknowledged.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from common.frames import FRAMES_MEDIA_TYPE, encode_upload
from tests.crash.http_workload import PASSWORD_HEADERS, Ledger, Round, verify
from tests.crash.workload import make_payload
from tools.local_server import ServerProcess

ADMIN_TOKEN = "powerloss-admin"
ADMIN_HEADERS = {"Authorization": f"Bearer {ADMIN_TOKEN}"}

# Small enough that an epoch of a second or two checkpoints (0.2 s), rotates
# entry logs (256 KiB), laps the journal (4 MiB) with payloads of up to 20 KB,
# and runs GC and compaction in the background (every 0.5 s and 1 s).
SERVER_SETTINGS = {
    "JOURNAL_CAPACITY": "4MiB",
    "WRITE_CACHE_SIZE": "512KiB",
    "READ_CACHE_SIZE": "1MiB",
    "MAX_ENTRY_SIZE": "64KiB",
    "ENTRY_LOG_SIZE_LIMIT": "256KiB",
    "FLUSH_INTERVAL": "0.2",
    "ACCESS_LOG": "false",
    "ADMIN_TOKEN": ADMIN_TOKEN,
    "GC_WAIT_TIME": "0.5",
    "MINOR_COMPACTION_INTERVAL": "0.5",
    "MAJOR_COMPACTION_INTERVAL": "1",
}


def ledgerd_on(data_dir: Path, log_path: Path,
               overrides: dict[str, str] | None = None) -> ServerProcess:
    settings = {**SERVER_SETTINGS, **(overrides or {}), "DATA_DIR": str(data_dir)}
    return ServerProcess(settings, log_path=log_path)


@dataclass
class History:
    """Everything acknowledged so far (and what was asked but not answered)."""

    ledgers: dict[int, Ledger] = field(default_factory=dict)
    """Acknowledged creates not acknowledged as deleted."""
    closed: dict[int, int] = field(default_factory=dict)
    """Ledger id -> the LAC its acknowledged close fixed."""
    deleted: set[int] = field(default_factory=set)
    closing: set[int] = field(default_factory=set)
    deleting: set[int] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)


def create_ledger(client: httpx.Client) -> int | None:
    """The new ledger's id, or None when the server said 503."""
    response = client.post("/api/v1/ledgers", json={"password": "pw"})
    if response.status_code == 503:
        return None
    assert response.status_code == 201, response.text
    ledger_id = response.json()["ledger_id"]
    assert isinstance(ledger_id, int)
    return ledger_id


def churn(rnd: Round, history: History, seed: int, deletes_done: threading.Event) -> None:
    """Create a ledger, fill it with one batch, close it; delete older closed ones."""
    rng = random.Random(seed)
    try:
        with httpx.Client(base_url=rnd.url, timeout=10.0) as client:
            while not rnd.stop.is_set():
                _churn_once(client, rnd, history, rng)
                if len(history.deleted) >= 3:
                    deletes_done.set()
    except httpx.TransportError:
        return  # the power is gone: what was in flight is unknown


def _done(rnd: Round, what: str, response: httpx.Response, status: int) -> bool:
    """True when the request took effect; False when refused (503: back-pressure)
    or failed (recorded in ``rnd.errors``, which fails the test)."""
    if response.status_code == status:
        return True
    if response.status_code != 503:
        rnd.errors.append(f"{what}: {response.status_code} {response.text[:300]}")
    return False


def _churn_once(client: httpx.Client, rnd: Round, history: History,
                rng: random.Random) -> None:
    ledger_id = create_ledger(client)
    if ledger_id is None:
        return
    ledger = Ledger(ledger_id)
    with history.lock:
        history.ledgers[ledger_id] = ledger
    payloads = [make_payload(f"{ledger_id}/churn/{i}") for i in range(rng.randint(1, 30))]
    response = client.post(f"/api/v1/ledgers/{ledger_id}/entries/batch",
                           content=encode_upload(payloads),
                           headers={**PASSWORD_HEADERS, "Content-Type": FRAMES_MEDIA_TYPE})
    if not _done(rnd, "batch", response, 201):
        return
    ledger.record(response.json()["first_entry_id"], payloads)
    history.closing.add(ledger_id)
    response = client.post(f"/api/v1/ledgers/{ledger_id}/close", headers=PASSWORD_HEADERS)
    with history.lock:
        history.closing.discard(ledger_id)
        if not _done(rnd, "close", response, 200):
            return
        history.closed[ledger_id] = response.json()["last_add_confirmed"]
        victims = sorted(set(history.closed) & set(history.ledgers) - {ledger_id})
    if victims and rng.random() < 0.7:
        _delete(client, rnd, history, rng.choice(victims))


def _delete(client: httpx.Client, rnd: Round, history: History, ledger_id: int) -> None:
    history.deleting.add(ledger_id)
    response = client.delete(f"/api/v1/ledgers/{ledger_id}", headers=PASSWORD_HEADERS)
    with history.lock:
        history.deleting.discard(ledger_id)
        if _done(rnd, "delete", response, 204):
            history.deleted.add(ledger_id)
            del history.ledgers[ledger_id]


def force_major_gc(url: str) -> None:
    try:
        response = httpx.put(f"{url}/api/v1/bookie/gc", json={"force_major": True},
                             headers=ADMIN_HEADERS, timeout=10.0)
    except httpx.TransportError:
        return  # the power is already gone
    assert response.status_code == 200, response.text


def wait_checkpointed(url: str, timeout_s: float) -> bool:
    """Wait until a checkpoint covers every journal record appended so far (the
    adds are paused, so from then on the write cache holds nothing to flush);
    False when the server died or the time ran out."""
    deadline = time.monotonic() + timeout_s
    with httpx.Client(base_url=url, timeout=10.0) as client:
        target = None
        while time.monotonic() < deadline:
            try:
                mark = client.get("/api/v1/bookie/last_log_mark").json()
            except httpx.TransportError:
                return False
            target = mark["appended_offset"] if target is None else target
            if mark["checkpoint_offset"] >= target:
                return True
            time.sleep(0.02)  # polling the server's checkpoint mark, 0.2 s flush interval
    return False


def listed_ledgers(client: httpx.Client) -> dict[int, dict[str, Any]]:
    listed: dict[int, dict[str, Any]] = {}
    after: int | None = None
    while True:
        params = {"limit": 1000} if after is None else {"limit": 1000, "after": after}
        response = client.get("/api/v1/ledgers", params=params)
        assert response.status_code == 200, response.text
        body = response.json()
        listed.update({item["ledger_id"]: item for item in body["ledgers"]})
        after = body["next_after"]
        if after is None:
            return listed


def verify_history(url: str, history: History) -> None:
    """After a restart: every acknowledged entry, create, close and delete holds;
    reads past the LAC are clean 404s; a ledger nobody saw acknowledged (a create
    or a delete cut short) is either absent or whole.  What was seen after a
    restart counts as acknowledged from then on (it must survive later cuts)."""
    with httpx.Client(base_url=url, timeout=60.0) as client:
        listed = listed_ledgers(client)
        for ledger_id in sorted(history.deleting - listed.keys()):
            history.ledgers.pop(ledger_id, None)  # an unacknowledged delete that happened
            history.deleted.add(ledger_id)
        history.deleting.clear()
        for ledger_id in sorted(listed.keys() - history.ledgers.keys()):
            assert ledger_id not in history.deleted, f"deleted ledger {ledger_id} came back"
            history.ledgers[ledger_id] = Ledger(ledger_id)  # an unacknowledged create
        for ledger_id, ledger in sorted(history.ledgers.items()):
            assert ledger_id in listed, f"acknowledged ledger {ledger_id} vanished"
            _verify_ledger(client, url, history, ledger)
        for ledger_id in sorted(history.deleted):
            _assert_not_found(client.get(f"/api/v1/ledgers/{ledger_id}"))
            _assert_not_found(client.get(f"/api/v1/ledgers/{ledger_id}/entries/0"))
        never_created = max([*listed, *history.deleted], default=0) + 1
        _assert_not_found(client.get(f"/api/v1/ledgers/{never_created}"))
        _assert_not_found(client.get(f"/api/v1/ledgers/{never_created}/entries/0"))


def _verify_ledger(client: httpx.Client, url: str, history: History, ledger: Ledger) -> None:
    info = verify(url, ledger)
    ledger_id = ledger.ledger_id
    if ledger_id in history.closing and info["state"] == "CLOSED":
        history.closed[ledger_id] = ledger.lac_after_restart  # an unacknowledged close
    history.closing.discard(ledger_id)
    if ledger_id in history.closed:
        assert info["state"] == "CLOSED", f"closed ledger {ledger_id} is {info['state']}"
        assert info["last_add_confirmed"] == history.closed[ledger_id], (
            f"closed ledger {ledger_id}: LAC {info['last_add_confirmed']}, "
            f"closed at {history.closed[ledger_id]}")
    lac = ledger.lac_after_restart
    for entry_id in (lac + 1, lac + 2, lac + 1000):
        _assert_not_found(client.get(f"/api/v1/ledgers/{ledger_id}/entries/{entry_id}"))


def _assert_not_found(response: httpx.Response) -> None:
    assert response.status_code == 404, f"{response.request.url}: {response.status_code} " \
                                        f"{response.text[:300]}"
    assert response.headers["content-type"].startswith("application/problem+json")
