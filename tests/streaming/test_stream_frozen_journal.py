"""§5a clauses that need acks held back: group commits and the flow-control window.

The journal lives on a real ext4 file system (a loop device made here) that the
test freezes with ``fsfreeze``: the journal's writes then block in the kernel as
on a stalled disk, so nothing becomes durable until the thaw.  Needs root
(loop devices, mount, fsfreeze); without it these tests fail, they never skip.
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

from streaming import encode_batch

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
    # Nothing acked while frozen: the server read exactly one window of messages.
    assert unacked == WINDOW_BYTES
    assert received == WINDOW_BYTES // MESSAGE_BYTES < count
    # ...and after the thaw, every message once, in order, and stored.
    assert [seq for seq, _, _ in transcript.acked] == list(range(count))
    assert transcript.failure is None
    assert server.entries(lid) == [m[0] for m in sent]
    assert server.metric("ledgerd_stream_unacknowledged_bytes") == 0


async def _send_all(ws: Any, messages: list[list[bytes]]) -> None:
    for message in messages:
        await ws.send(encode_batch(message))
