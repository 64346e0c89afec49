"""Crash test under streaming load: SIGKILL ``ledgerd serve`` while append streams
pipeline batches into it, restart it, and let the clients resume.

One stream per ledger (its only writer), 16 messages in flight, batches of 1-5
entries of up to 32 KiB against a 1 MiB write cache and an 8 MiB journal (so
flushes, checkpoints and trims happen).  Each round kills the server once a
random number of acks has arrived and restarts it on the same data directory;
the clients reconnect on their own and send their unacknowledged messages again
by entry id.  Checked after every restart and at the end:

- every acknowledged entry reads back byte for byte;
- per stream, acks arrive in send order with the ids of the send order, and the
  ledger's entries are a prefix of what was sent (nothing reordered, nothing
  extra);
- at the end, after the last resume, the ledger holds every entry sent exactly
  once (exactly-once resume across crashes).
"""

from __future__ import annotations

import asyncio
import os
import random
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from common.frames import FRAMES_MEDIA_TYPE, decode_download
from streaming import Appended, AppendStream
from tests.app.conftest import LiveServer

ROUNDS = 4
LEDGERS = 3
SEED = int(os.environ.get("LEDGERD_TEST_SEED", "20251124"))


@dataclass
class Ledger:
    ledger_id: int
    sent: list[bytes] = field(default_factory=list)
    acked: int = 0  # entries acknowledged, from id 0
    errors: list[str] = field(default_factory=list)

    def on_ack(self, future: asyncio.Future[Appended], first: int, count: int) -> None:
        if future.cancelled() or future.exception() is not None:
            self.errors.append(f"message at {first}: {future.exception()!r}")
            return
        appended = future.result()
        if (appended.first_entry_id, appended.last_entry_id) != (first, first + count - 1):
            self.errors.append(f"message sent as {first}+{count} acked as {appended}")
        if first != self.acked:
            self.errors.append(f"ack for {first} while {self.acked} entries were acked")
        self.acked = first + count


async def write(ledger: Ledger, stream: AppendStream, rng: random.Random,
                stop: asyncio.Event) -> None:
    while not stop.is_set():
        count = rng.randint(1, 5)
        first = len(ledger.sent)
        payloads = [f"{ledger.ledger_id}/{first + i}/".encode()
                    + rng.randbytes(rng.randint(0, 32768)) for i in range(count)]
        ledger.sent.extend(payloads)
        future = await stream.send(payloads)
        future.add_done_callback(lambda f, a=first, n=count: ledger.on_ack(f, a, n))


def verify(url: str, ledger: Ledger) -> int:
    """Check the ledger against what was sent and acked; returns its LAC."""
    acked = ledger.acked  # before the read: the clients keep appending meanwhile
    with httpx.Client(base_url=url, timeout=60) as client:
        response = client.get(f"/api/v1/ledgers/{ledger.ledger_id}/entries",
                              headers={"Accept": FRAMES_MEDIA_TYPE})
        assert response.status_code == 200, response.text
    stored = [payload for _, _, payload in decode_download(response.content)]
    assert len(stored) >= acked, f"ledger {ledger.ledger_id} lost acknowledged entries"
    assert stored == ledger.sent[:len(stored)], "stored entries are not a prefix of those sent"
    return len(stored) - 1


async def acks_reached(ledgers: list[Ledger], target: int) -> None:
    while sum(ledger.acked for ledger in ledgers) < target:
        await asyncio.sleep(0.005)  # polling the clients' ack counters


@pytest.mark.slow
def test_sigkill_under_streaming_load_loses_no_ack_and_resumes_exactly_once(tmp_path: Path):
    rng = random.Random(SEED)
    server = LiveServer(tmp_path / "data", {"journal_capacity": "8MiB",
                                            "write_cache_size": "1MiB",
                                            "flush_interval": 0.3,
                                            "max_entry_size": "64KiB"}).start()

    async def scenario() -> list[Ledger]:
        async with httpx.AsyncClient(base_url=server.url) as client:
            ledgers = [Ledger((await client.post("/api/v1/ledgers",
                                                 json={"password": "pw"})).json()["ledger_id"])
                       for _ in range(LEDGERS)]
        streams = [await AppendStream.open(server.url, ledger.ledger_id, password="pw",
                                           next_entry_id=0, reconnect_attempts=60,
                                           reconnect_delay_s=0.05) for ledger in ledgers]
        stop = asyncio.Event()
        writers = [asyncio.create_task(write(ledger, stream, random.Random(rng.random()), stop))
                   for ledger, stream in zip(ledgers, streams, strict=True)]
        for _ in range(ROUNDS):
            target = sum(ledger.acked for ledger in ledgers) + rng.randint(20, 300)
            await asyncio.wait_for(acks_reached(ledgers, target), 60)
            await asyncio.to_thread(server.kill)  # SIGKILL at a moment chosen by the acks
            await asyncio.to_thread(server.start)
            for ledger in ledgers:
                await asyncio.to_thread(verify, server.url, ledger)
        stop.set()
        await asyncio.gather(*writers)
        for stream in streams:
            await stream.close()
        assert sum(stream.reconnects for stream in streams) >= ROUNDS
        return ledgers

    try:
        ledgers = asyncio.run(asyncio.wait_for(scenario(), 600))
        for ledger in ledgers:
            assert not ledger.errors, ledger.errors[:5]
            assert ledger.acked == len(ledger.sent)
            assert verify(server.url, ledger) == len(ledger.sent) - 1  # exactly once
        assert sum(ledger.acked for ledger in ledgers) > ROUNDS * 20
    finally:
        server.stop()
