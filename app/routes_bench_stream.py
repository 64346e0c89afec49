"""The append stream's floor, for the benchmarks only (``BENCH_ENDPOINTS=true``).

``/api/v1/noop/stream`` speaks the stream protocol (DESIGN.md §5a) through the
same server, WebSocket implementation and codec as the real route, but appends
nothing: each message is decoded and acknowledged by an acker task that sends
one acks message for everything received since its last pass, as the real
route groups acks per group commit.  What ledgerd's streams reach is measured
against it: the part of a stream's cost that is the HTTP server's and Python's,
not the engine's.
"""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, WebSocket, WebSocketDisconnect

from streaming import SUBPROTOCOL, decode_batch, encode_acks

from .routes_stream import stream_limits

router = APIRouter()

NOOP_STREAM_PATH = "/api/v1/noop/stream"


@router.websocket(NOOP_STREAM_PATH)
async def noop_stream(websocket: WebSocket) -> None:
    await websocket.accept(subprotocol=SUBPROTOCOL)
    limits = stream_limits(websocket.app.state.service.settings)
    received: list[tuple[int, int, int]] = []  # (seq, first, last) not yet acknowledged
    ready = asyncio.Event()

    async def ack_loop() -> None:
        while True:
            await ready.wait()
            ready.clear()
            acks = received.copy()
            received.clear()
            await websocket.send_text(encode_acks(acks, acks[-1][2]))

    acker = asyncio.create_task(ack_loop(), name="noop-stream-acker")
    seq, last = 0, -1
    try:
        while True:
            batch = decode_batch(await websocket.receive_bytes(), limits)
            first, last = last + 1, last + len(batch.payloads)
            received.append((seq, first, last))
            seq += 1
            ready.set()
    except WebSocketDisconnect:
        pass
    finally:
        acker.cancel()
