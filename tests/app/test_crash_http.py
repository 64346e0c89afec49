"""Crash test at the HTTP level: SIGKILL the server mid-load, restart, check every ack.

Each round: worker threads append over HTTP (single entries and frame batches,
random sizes up to 32 KiB against a 1 MiB write cache and an 8 MiB journal, so
flushes, checkpoints and journal trims happen), the server is SIGKILLed once a
random number of appends has been acknowledged, then restarted on the same data
directory.  Every 2xx-acknowledged entry must read back byte for byte, ids stay
dense, and a ledger's last-add-confirmed never goes backwards.
"""

from __future__ import annotations

import os
import random
import threading
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from app.frames import FRAMES_MEDIA_TYPE, decode_download, encode_upload

from .conftest import LiveServer

ROUNDS = 10
LEDGERS = 3
WORKERS_PER_LEDGER = 2
SEED = int(os.environ.get("LEDGERD_TEST_SEED", "20251123"))


@dataclass
class Ledger:
    ledger_id: int
    acked: dict[int, bytes] = field(default_factory=dict)
    lac_after_restart: int = -1
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, first_id: int, payloads: list[bytes]) -> None:
        with self.lock:
            for offset, payload in enumerate(payloads):
                previous = self.acked.setdefault(first_id + offset, payload)
                assert previous == payload, f"entry {first_id + offset} acknowledged twice"


class Round:
    def __init__(self, url: str, kill_after_acks: int) -> None:
        self.url = url
        self.kill_after_acks = kill_after_acks
        self.acks = 0
        self.lock = threading.Lock()
        self.target_reached = threading.Event()
        self.stop = threading.Event()
        self.errors: list[str] = []

    def acknowledged(self) -> None:
        with self.lock:
            self.acks += 1
            if self.acks >= self.kill_after_acks:
                self.target_reached.set()


def worker(rnd: Round, ledger: Ledger, seed: int, batches: bool) -> None:
    rng = random.Random(seed)
    headers = {"X-Ledger-Password": "pw"}
    with httpx.Client(base_url=rnd.url, timeout=10.0) as client:
        n = 0
        while not rnd.stop.is_set():
            count = rng.randint(1, 5) if batches else 1
            payloads = [
                f"{ledger.ledger_id}/{seed}/{n + i}/".encode()
                + rng.randbytes(rng.randint(0, 32768))
                for i in range(count)
            ]
            n += count
            try:
                if batches:
                    response = client.post(
                        f"/api/v1/ledgers/{ledger.ledger_id}/entries/batch",
                        content=encode_upload(payloads),
                        headers={**headers, "Content-Type": FRAMES_MEDIA_TYPE},
                    )
                else:
                    response = client.post(
                        f"/api/v1/ledgers/{ledger.ledger_id}/entries",
                        content=payloads[0],
                        headers={**headers, "Content-Type": "application/octet-stream"},
                    )
            except httpx.TransportError:
                return  # the server is gone: this request's fate is unknown
            if response.status_code == 503:
                continue  # back-pressure: retry with new data
            if response.status_code not in (200, 201):
                rnd.errors.append(f"{response.status_code} {response.text[:300]}")
                return
            body = response.json()
            first = body["first_entry_id"] if batches else body["entry_id"]
            ledger.record(first, payloads)
            rnd.acknowledged()


def verify(url: str, ledger: Ledger) -> None:
    with httpx.Client(base_url=url, timeout=60.0) as client:
        info = client.get(f"/api/v1/ledgers/{ledger.ledger_id}").json()
        lac = info["last_add_confirmed"]
        acked_max = max(ledger.acked, default=-1)
        assert lac >= acked_max, f"ledger {ledger.ledger_id}: LAC {lac} < acked {acked_max}"
        assert lac >= ledger.lac_after_restart, "LAC went backwards across a restart"
        response = client.get(
            f"/api/v1/ledgers/{ledger.ledger_id}/entries", headers={"Accept": FRAMES_MEDIA_TYPE}
        )
        assert response.status_code == 200
        frames = decode_download(response.content)
    assert [entry_id for entry_id, _, _ in frames] == list(range(lac + 1)), "ids not dense"
    for entry_id, _, payload in frames:
        if entry_id in ledger.acked:
            assert payload == ledger.acked[entry_id], f"entry {entry_id} differs after crash"
        else:
            # Written but never acknowledged: allowed to survive, but must be ours whole.
            assert payload.startswith(f"{ledger.ledger_id}/".encode())
    ledger.lac_after_restart = lac


@pytest.mark.slow
def test_sigkill_under_concurrent_appends_loses_no_acknowledged_entry(tmp_path: Path):
    rng = random.Random(SEED)
    server = LiveServer(
        tmp_path / "data",
        {
            "journal_capacity": "8MiB",
            "write_cache_size": "1MiB",
            "flush_interval": 0.3,
            "max_entry_size": "64KiB",
        },
    ).start()
    try:
        with httpx.Client(base_url=server.url) as client:
            ledgers = [
                Ledger(client.post("/api/v1/ledgers", json={"password": "pw"}).json()["ledger_id"])
                for _ in range(LEDGERS)
            ]
        for round_index in range(ROUNDS):
            rnd = Round(server.url, kill_after_acks=rng.randint(10, 400))
            threads = [
                threading.Thread(
                    target=worker,
                    args=(rnd, ledger, rng.randrange(2**32), w == 0 and round_index % 2 == 0),
                )
                for ledger in ledgers
                for w in range(WORKERS_PER_LEDGER)
            ]
            for thread in threads:
                thread.start()
            reached = rnd.target_reached.wait(timeout=60)
            server.kill()  # SIGKILL at a moment chosen by the acknowledgement count
            rnd.stop.set()
            for thread in threads:
                thread.join(timeout=60)
            assert not rnd.errors, rnd.errors
            assert reached, f"round {round_index}: only {rnd.acks} acks"
            server.start()
            for ledger in ledgers:
                verify(server.url, ledger)
        assert sum(len(ledger.acked) for ledger in ledgers) > ROUNDS * 10
    finally:
        server.stop()
