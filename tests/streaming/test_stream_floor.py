"""The stream's floors for the benchmarks (``/api/v1/noop/stream`` and
``/api/v1/noop/durable-stream``): the protocol's acks with no engine, the second
after writing and syncing its own file, and only when BENCH_ENDPOINTS is on."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from websockets.exceptions import InvalidStatus

from app.routes_bench_stream import NOOP_DURABLE_STREAM_PATH, NOOP_STREAM_PATH
from streaming import encode_batch

from ._wire import raw_stream, read_until
from .conftest import StreamServer


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[StreamServer, ...]]:
    bench = StreamServer(tmp_path_factory.mktemp("floor") / "data", bench_endpoints=True)
    plain = StreamServer(tmp_path_factory.mktemp("plain") / "data")
    bench.start()
    plain.start()
    try:
        yield bench, plain
    finally:
        bench.stop()
        plain.stop()


def _url(server: StreamServer, path: str = NOOP_STREAM_PATH) -> str:
    return server.url.replace("http://", "ws://") + path


def run(coroutine: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coroutine, 60))


def test_the_floor_acknowledges_every_message_in_order_and_appends_nothing(
        servers: tuple[StreamServer, ...]) -> None:
    bench, _ = servers

    async def scenario() -> Any:
        async with raw_stream(_url(bench)) as ws:
            for payloads in ([b"a"], [b"b", b"c"], [b"d"] * 5):
                await ws.send(encode_batch(payloads))
            return await read_until(ws, acks=3)

    assert run(scenario()).acked == [(0, 0, 0), (1, 1, 2), (2, 3, 7)]
    assert bench.app.state.service.node.bookie.journal.synced_offset == 0  # nothing journalled


def test_the_durable_floor_syncs_its_own_file_and_removes_it(
        servers: tuple[StreamServer, ...]) -> None:
    bench, _ = servers
    data_dir = bench.settings.data_dir
    seen: list[tuple[str, int]] = []

    async def scenario() -> Any:
        async with raw_stream(_url(bench, NOOP_DURABLE_STREAM_PATH)) as ws:
            for payloads in ([b"a" * 5000], [b"b", b"c"]):
                await ws.send(encode_batch(payloads))
            transcript = await read_until(ws, acks=2)
            seen.extend((p.name, p.stat().st_size) for p in data_dir.glob("bench-floor-*"))
            await ws.send(encode_batch([b"d"]))
            transcript.acks += (await read_until(ws, acks=1)).acks
        # The handler removes the file once it has seen the close, which may be
        # after the client's close handshake returned: wait for that, bounded.
        deadline = asyncio.get_running_loop().time() + 30
        while list(data_dir.glob("bench-floor-*")) \
                and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        return transcript

    assert run(scenario()).acked == [(0, 0, 0), (1, 1, 2), (2, 3, 3)]
    assert len(seen) == 1 and seen[0][1] == 8 * 1024 * 1024, seen  # its file, while open
    assert bench.app.state.service.node.bookie.journal.synced_offset == 0  # nothing journalled
    assert not list(data_dir.glob("bench-floor-*"))  # removed when the stream ended


def test_without_bench_endpoints_there_is_no_floor(servers: tuple[StreamServer, ...]) -> None:
    _, plain = servers

    async def scenario() -> None:
        async with raw_stream(_url(plain)):
            pass

    with pytest.raises(InvalidStatus):
        run(scenario())
