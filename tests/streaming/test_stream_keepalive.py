"""§5a keepalive and idle streams: pings and pongs, ``STREAM_IDLE_TIMEOUT``.

The server runs with short keepalive settings (uvicorn pings every 0.1 s and
drops a peer whose pong is 0.3 s late) and a 1.5 s idle timeout, so each test
takes a few seconds; the durations asserted are lower bounds (the server may
be late on a busy machine, never early).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest

from streaming import encode_batch

from ._wire import raw_stream, read_until
from .conftest import StreamServer

PING_INTERVAL_S = 0.1
PING_TIMEOUT_S = 0.3
IDLE_TIMEOUT_S = 1.5


@pytest.fixture(scope="module")
def keepalive_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StreamServer]:
    server = StreamServer(tmp_path_factory.mktemp("keepalive") / "data",
                          uvicorn_options={"ws_ping_interval": PING_INTERVAL_S,
                                           "ws_ping_timeout": PING_TIMEOUT_S},
                          stream_idle_timeout=IDLE_TIMEOUT_S).start()
    try:
        yield server
    finally:
        server.stop()


def run(coroutine: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coroutine, 60))


def test_a_peer_that_answers_pings_stays_connected(keepalive_server: StreamServer):
    lid = keepalive_server.create_ledger()

    async def scenario() -> Any:
        async with raw_stream(keepalive_server.stream_url(lid)) as ws:
            # Several ping intervals and timeouts pass with no message; the client
            # library answers every ping.  (A wait for time to pass, not a sync.)
            await asyncio.sleep(IDLE_TIMEOUT_S * 0.6)
            await ws.send(encode_batch([b"still here"]))
            return await read_until(ws, acks=1)

    assert run(scenario()).acked == [(0, 0, 0)]


def test_a_peer_that_stops_answering_pings_is_dropped(keepalive_server: StreamServer):
    lid = keepalive_server.create_ledger()

    async def scenario() -> Any:
        async with raw_stream(keepalive_server.stream_url(lid)) as ws:
            await ws.send(encode_batch([b"one"]))
            assert (await read_until(ws, acks=1)).acked == [(0, 0, 0)]
            open_streams = await asyncio.to_thread(keepalive_server.metric,
                                                   "ledgerd_streams_open")
            # Read nothing, so the server's pings get no pong, until the server
            # has dropped the stream (far sooner than its idle timeout).
            ws.transport.pause_reading()
            await asyncio.to_thread(_wait_for_fewer_streams, keepalive_server, open_streams)
            ws.transport.resume_reading()
            return await read_until(ws)

    transcript = run(scenario())
    assert transcript.acks == [] and transcript.failure is None
    assert transcript.close_code in (1011, 1006)  # keepalive ping timeout, or just gone


def _wait_for_fewer_streams(server: StreamServer, open_streams: float) -> None:
    deadline = time.monotonic() + 30
    while server.metric("ledgerd_streams_open") >= open_streams:
        assert time.monotonic() < deadline, "the server kept a peer that answers no ping"
        time.sleep(0.02)  # polling the server's gauge


def test_an_idle_stream_is_closed_with_1001_and_pongs_do_not_count(
        keepalive_server: StreamServer):
    lid = keepalive_server.create_ledger()

    async def scenario() -> tuple[Any, float]:
        async with raw_stream(keepalive_server.stream_url(lid)) as ws:
            last_message = time.monotonic()
            await ws.send(encode_batch([b"one"]))
            assert (await read_until(ws, acks=1)).acked == [(0, 0, 0)]
            # Pings of our own and pongs to the server's keep flowing meanwhile.
            pinger = asyncio.create_task(_ping_forever(ws))
            transcript = await read_until(ws)
            pinger.cancel()
            return transcript, time.monotonic() - last_message

    transcript, idle_s = run(scenario())
    assert transcript.close_code == 1001
    assert idle_s >= IDLE_TIMEOUT_S
    assert keepalive_server.entries(lid) == [b"one"]


def test_client_messages_keep_a_stream_from_going_idle(keepalive_server: StreamServer):
    lid = keepalive_server.create_ledger()
    count = 8

    async def scenario() -> tuple[Any, float, float]:
        async with raw_stream(keepalive_server.stream_url(lid)) as ws:
            started = time.monotonic()
            for i in range(count):  # one message every 0.4 timeouts: 2.8 timeouts in all
                if i:
                    await asyncio.sleep(IDLE_TIMEOUT_S * 0.4)  # pacing the messages
                last_message = time.monotonic()
                await ws.send(encode_batch([b"tick %d" % i]))
            transcript = await read_until(ws)
            closed = time.monotonic()
            return transcript, closed - started, closed - last_message

    transcript, open_s, idle_s = run(scenario())
    assert [seq for seq, _, _ in transcript.acked] == list(range(count))
    assert transcript.close_code == 1001
    assert open_s > IDLE_TIMEOUT_S * 0.4 * (count - 1) > 2 * IDLE_TIMEOUT_S
    assert idle_s >= IDLE_TIMEOUT_S


async def _ping_forever(ws: Any) -> None:
    while True:
        await ws.ping()
        await asyncio.sleep(PING_INTERVAL_S)  # pacing the pings
