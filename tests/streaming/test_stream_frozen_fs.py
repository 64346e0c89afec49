"""§5a clauses that need a stalled disk: group commits, the flow-control window,
and a client riding out back-pressure (503).

The journal (or the data directory) lives on a real ext4 file system (a loop
device made here) that the test freezes with ``fsfreeze``: writes to it then
block in the kernel as on a stalled disk until the thaw.  Needs root (loop
devices, mount, fsfreeze); without it these tests fail, they never skip.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from streaming import AppendStream, encode_batch

from ._wire import raw_stream, read_until
from .conftest import StreamServer

WINDOW_BYTES = 64 * 1024
MESSAGE_BYTES = 4 * 1024


class FreezableFileSystem:
    """ext4 on a loop device, mounted under ``directory``; ``freeze()``/``thaw()``."""

    def __init__(self, directory: Path, size_bytes: int = 64 * 1024 * 1024) -> None:
        assert os.geteuid() == 0, "these tests need root: loop device, mount, fsfreeze"
        self.mount_point = directory / "mnt"
        self.mount_point.mkdir(parents=True)
        backing = directory / "fs.img"
        with open(backing, "wb") as f:
            f.truncate(size_bytes)
        self.device = subprocess.run(["losetup", "--find", "--show", str(backing)], check=True,
                                     capture_output=True, text=True).stdout.strip()
        subprocess.run(["mkfs.ext4", "-q", self.device], check=True)
        subprocess.run(["mount", self.device, str(self.mount_point)], check=True)
        self.frozen = False

    def freeze(self) -> None:
        subprocess.run(["fsfreeze", "--freeze", str(self.mount_point)], check=True)
        self.frozen = True

    def thaw(self) -> None:
        if self.frozen:
            subprocess.run(["fsfreeze", "--unfreeze", str(self.mount_point)], check=True)
            self.frozen = False

    def remove(self) -> None:
        self.thaw()
        subprocess.run(["umount", str(self.mount_point)], check=False)
        subprocess.run(["losetup", "--detach", self.device], check=False)


@pytest.fixture
def frozen_setup(tmp_path: Path) -> Iterator[tuple[StreamServer, FreezableFileSystem]]:
    fs = FreezableFileSystem(tmp_path / "fs")
    server = StreamServer(tmp_path / "data", journal_device=fs.mount_point / "journal.dev",
                          stream_window_bytes=WINDOW_BYTES)
    try:
        server.start()
        yield server, fs
    finally:
        fs.thaw()  # before anything else: a frozen journal blocks the server's shutdown
        server.stop()
        fs.remove()


def run(coroutine: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coroutine, 120))


def _wait_for_metric(server: StreamServer, name: str, at_least: float) -> float:
    deadline = time.monotonic() + 30
    while (value := server.metric(name)) < at_least:
        assert time.monotonic() < deadline, f"{name} stayed at {value} < {at_least}"
        time.sleep(0.02)  # polling the server's metrics
    return value


def test_acks_made_durable_by_one_group_commit_travel_in_one_message(frozen_setup: Any):
    server, fs = frozen_setup
    lid = server.create_ledger()
    sent = [[b"g%d" % i * 100] for i in range(50)]
    adds = server.metric("ledgerd_bookie_adds_total")

    async def scenario() -> Any:
        async with raw_stream(server.stream_url(lid)) as ws:
            fs.freeze()
            try:
                for message in sent:
                    await ws.send(encode_batch(message))
                # Every message is appended (in the journal's buffer and the write
                # cache) while its block waits for the frozen disk.
                await asyncio.to_thread(_wait_for_metric, server, "ledgerd_bookie_adds_total",
                                        adds + len(sent))
            finally:
                fs.thaw()
            return await read_until(ws, acks=len(sent))

    transcript = run(scenario())
    assert [seq for seq, _, _ in transcript.acked] == list(range(len(sent)))
    # The first record's block was on its way to the disk when it froze; the other
    # 49 waited in the next block.  After the thaw at most two group commits make
    # them durable (one if the first sync starts after both writes), so at most
    # two ack messages, where acks sent per message would be 50.
    assert len(transcript.acks) <= 2
    assert server.entries(lid) == [m[0] for m in sent]


def test_past_the_window_the_server_stops_reading_and_drops_nothing(frozen_setup: Any):
    server, fs = frozen_setup
    lid = server.create_ledger()
    count = 200
    sent = [[bytes([i % 256]) * MESSAGE_BYTES] for i in range(count)]
    received_before = server.metric("ledgerd_stream_messages_total")

    async def scenario() -> tuple[float, float, Any]:
        async with raw_stream(server.stream_url(lid)) as ws:
            fs.freeze()
            try:
                sender = asyncio.create_task(_send_all(ws, sent))
                unacked = await asyncio.to_thread(
                    _wait_for_metric, server, "ledgerd_stream_unacknowledged_bytes",
                    WINDOW_BYTES)
                received = await asyncio.to_thread(
                    server.metric, "ledgerd_stream_messages_total")
            finally:
                fs.thaw()
            transcript = await read_until(ws, acks=count)
            await sender
            return unacked, received - received_before, transcript

    unacked, received, transcript = run(scenario())
    # Nothing acked while frozen: the server read messages until their bytes
    # (entries and framing) reached the window, and not one more.
    wire_bytes = len(encode_batch(sent[0]))
    assert received == -(-WINDOW_BYTES // wire_bytes) < count
    assert unacked == received * wire_bytes
    # ...and after the thaw, every message once, in order, and stored.
    assert [seq for seq, _, _ in transcript.acked] == list(range(count))
    assert transcript.failure is None
    assert server.entries(lid) == [m[0] for m in sent]
    assert server.metric("ledgerd_stream_unacknowledged_bytes") == 0


async def _send_all(ws: Any, messages: list[list[bytes]]) -> None:
    for message in messages:
        await ws.send(encode_batch(message))


@pytest.fixture
def frozen_data_setup(tmp_path: Path) -> Iterator[tuple[StreamServer, FreezableFileSystem]]:
    """Entry logs and index on the freezable file system, the journal elsewhere."""
    fs = FreezableFileSystem(tmp_path / "fs")
    server = StreamServer(fs.mount_point / "data", journal_device=tmp_path / "journal.dev")
    try:
        server.start()
        yield server, fs
    finally:
        fs.thaw()
        server.stop()
        fs.remove()


def test_client_pauses_on_back_pressure_and_resumes_exactly_once(frozen_data_setup: Any):
    """With the entry logs frozen no flush completes, the write cache (1 MiB) stays
    full, an add waits its bounded time and fails with 503: the server sends the
    error and closes with 4503; the client pauses, reconnects and sends that
    message and the later ones again by entry id."""
    server, fs = frozen_data_setup
    lid = server.create_ledger()
    sent = [[bytes([i]) * 32 * 1024 for _ in range(8)] for i in range(24)]  # 6 MiB

    async def scenario() -> tuple[list[Any], int]:
        stream = await AppendStream.open(server.url, lid, password="pw", next_entry_id=0)
        fs.freeze()
        try:
            sender = asyncio.create_task(_send_in_order(stream, sent))
            while stream.backpressure_pauses == 0:  # polling the client's counter
                assert not sender.done() or sender.exception() is None
                await asyncio.sleep(0.02)
        finally:
            fs.thaw()
        futures = await sender
        results = await asyncio.gather(*futures)
        await stream.close()
        return results, stream.reconnects

    results, reconnects = run(scenario())
    assert reconnects >= 1
    assert [(r.first_entry_id, r.last_entry_id) for r in results] == [
        (8 * i, 8 * i + 7) for i in range(len(sent))]
    assert server.entries(lid) == [p for message in sent for p in message]


async def _send_in_order(stream: AppendStream, messages: list[list[bytes]]) -> list[Any]:
    return [await stream.send(message) for message in messages]
