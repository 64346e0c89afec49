"""The append stream's floors, for the benchmarks only (``BENCH_ENDPOINTS=true``).

``/api/v1/noop/stream`` speaks the stream protocol (DESIGN.md §5a) through the
same server, WebSocket implementation and codec as the real route, but appends
nothing: each message is decoded and acknowledged by an acker task that sends
one acks message for everything received since its last pass, as the real
route groups acks per group commit.  What ledgerd's streams reach is measured
against it: the part of a stream's cost that is the HTTP server's and Python's,
not the engine's.

``/api/v1/noop/durable-stream`` is the same with durability at its cheapest:
before each acks message the acker writes that many bytes (4 KiB aligned) to a
file of its own with O_DIRECT and ``fdatasync``s it, right on the event loop's
thread, with no hand-over to another thread: what Redis does with
``appendfsync always``.  It is the floor of any design that makes a stream's
window durable before acknowledging it, one sync per pass: the WebSocket layer
and the device one after the other, and nothing else.  The file (a few MiB,
zero-filled once so that writes overwrite written blocks and change no
metadata) sits in the data directory and is removed when the stream ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path

from fastapi import APIRouter, WebSocket, WebSocketDisconnect

from common.units import MiB
from journal import DirectDevice, align_up, aligned_buffer
from streaming import SUBPROTOCOL, decode_batch, encode_acks

from .routes_stream import stream_limits

router = APIRouter()

NOOP_STREAM_PATH = "/api/v1/noop/stream"
NOOP_DURABLE_STREAM_PATH = "/api/v1/noop/durable-stream"
# The durable floor's file, written round robin, and its largest single write.
_FLOOR_FILE_BYTES = 8 * MiB
_FLOOR_WRITE_BYTES_MAX = 1 * MiB


class _FloorLog:
    """A durable floor stream's file: ``commit(n)`` makes n bytes durable."""

    def __init__(self, device: DirectDevice) -> None:
        self._device = device
        self._buffer = aligned_buffer(_FLOOR_WRITE_BYTES_MAX)
        self._offset = 0
        view = memoryview(self._buffer)
        for offset in range(0, device.size_bytes - len(view) + 1, len(view)):
            device.pwrite(offset, view)  # written once: no extent conversion later
        device.sync()
        view.release()

    def commit(self, nbytes: int) -> None:
        size = min(align_up(max(nbytes, 1)), len(self._buffer))
        if self._offset + size > self._device.size_bytes:
            self._offset = 0
        view = memoryview(self._buffer)[:size]
        try:
            self._device.pwrite(self._offset, view)
        finally:
            view.release()
        self._device.sync()
        self._offset += size

    def close(self) -> None:
        self._device.close()
        self._buffer.close()


@contextlib.contextmanager
def _floor_log(data_dir: Path) -> Iterator[_FloorLog]:
    path = data_dir / f"bench-floor-{uuid.uuid4().hex}.dev"
    log = _FloorLog(DirectDevice(path, create_size_bytes=_FLOOR_FILE_BYTES))
    try:
        yield log
    finally:
        log.close()
        path.unlink(missing_ok=True)


@router.websocket(NOOP_STREAM_PATH)
async def noop_stream(websocket: WebSocket) -> None:
    await _floor(websocket, None)


@router.websocket(NOOP_DURABLE_STREAM_PATH)
async def noop_durable_stream(websocket: WebSocket) -> None:
    with _floor_log(websocket.app.state.service.settings.data_dir) as log:
        await _floor(websocket, log)


async def _floor(websocket: WebSocket, log: _FloorLog | None) -> None:
    await websocket.accept(subprotocol=SUBPROTOCOL)
    limits = stream_limits(websocket.app.state.service.settings)
    received: list[tuple[int, int, int]] = []  # (seq, first, last) not yet acknowledged
    received_bytes = 0  # of those messages
    ready = asyncio.Event()

    async def ack_loop() -> None:
        nonlocal received_bytes
        while True:
            await ready.wait()
            ready.clear()
            acks = received.copy()
            received.clear()
            if log is not None:
                log.commit(received_bytes)  # blocks the loop: no hand-over at all
            received_bytes = 0
            await websocket.send_text(encode_acks(acks, acks[-1][2]))

    acker = asyncio.create_task(ack_loop(), name="noop-stream-acker")
    seq, last = 0, -1
    try:
        while True:
            data = await websocket.receive_bytes()
            batch = decode_batch(data, limits)
            first, last = last + 1, last + len(batch.payloads)
            received.append((seq, first, last))
            received_bytes += len(data)
            seq += 1
            ready.set()
    except WebSocketDisconnect:
        pass
    finally:
        acker.cancel()
        # Done with the file before it is closed; a send that failed as the
        # client left ends the acker too, and is no error of the floor's.
        await asyncio.gather(acker, return_exceptions=True)
