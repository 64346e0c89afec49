"""Crash test at the HTTP level: SIGKILL the server mid-load, restart, check every ack.

Each round: worker threads append over HTTP (single entries and frame batches,
self-checking payloads of up to 20 KB against a 1 MiB write cache and an 8 MiB
journal, so flushes, checkpoints and journal trims happen), the server is
SIGKILLed once a random number of appends has been acknowledged, then restarted
on the same data directory.  Every 2xx-acknowledged entry must read back byte for
byte, ids stay dense, and a ledger's last-add-confirmed never goes backwards.
The workload and the verifier live in ``tests/crash/http_workload.py``.
"""

from __future__ import annotations

import os
import random
import threading
from pathlib import Path

import httpx
import pytest

from tests.crash.http_workload import Ledger, Round, verify, worker

from .conftest import LiveServer

ROUNDS = 8
LEDGERS = 3
WORKERS_PER_LEDGER = 2
SEED = int(os.environ.get("LEDGERD_TEST_SEED", "20251123"))


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
