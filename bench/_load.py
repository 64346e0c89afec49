"""Closed-loop load: ``concurrency`` clients, each doing one operation after
another for ``duration_s``.  :func:`closed_loop` runs them as tasks of one
asyncio event loop (both sides of a comparison use it, so the load generators
are the same kind of Python client); :func:`threaded_closed_loop` as threads
calling the engine directly."""

from __future__ import annotations

import asyncio
import ssl
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from ._harness import Row, percentile


@dataclass
class LoadResult:
    ops: int
    elapsed_s: float
    latencies_s: list[float] = field(default_factory=list)

    def row(self, name: str, params: dict[str, Any], bytes_per_op: int, *,
            entries_per_op: int = 1) -> Row:
        """A row in MB/s of payload, with entries/s, ops/s and p50/p99 per op."""
        return Row(name, dict(params), self.ops * bytes_per_op / self.elapsed_s / 1e6, "MB/s",
                   extra={"entries_per_s": self.ops * entries_per_op / self.elapsed_s,
                          "ops_per_s": self.ops / self.elapsed_s,
                          "p50_ms": percentile(self.latencies_s, 50) * 1e3,
                          "p99_ms": percentile(self.latencies_s, 99) * 1e3})


async def closed_loop(op: Callable[[int], Awaitable[None]], *, concurrency: int,
                      duration_s: float) -> LoadResult:
    """``concurrency`` tasks; task ``n`` awaits ``op(n)`` again and again."""
    latencies: list[float] = []
    started = time.perf_counter()
    deadline = started + duration_s

    async def worker(n: int) -> None:
        while time.perf_counter() < deadline:
            t0 = time.perf_counter()
            await op(n)
            latencies.append(time.perf_counter() - t0)

    await asyncio.gather(*(worker(n) for n in range(concurrency)))
    return LoadResult(len(latencies), time.perf_counter() - started, latencies)


class HttpConnection:
    """A minimal HTTP/1.1 keep-alive client on one asyncio connection, for load
    generation only.  httpx costs the client ~3 ms of CPU a request here (its
    pool, models and event hooks), five times what the server spends on a no-op,
    so an httpx load measured httpx.  This sends prebuilt bytes and reads a
    Content-Length response: about what redis-py does for Redis."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 host: str) -> None:
        self._reader, self._writer, self._host = reader, writer, host

    @classmethod
    async def open(cls, url: str, context: ssl.SSLContext | None = None) -> HttpConnection:
        """A connection to ``url``'s host; ``https://`` needs the ``context`` that
        verifies the server."""
        parts = urlsplit(url)
        assert parts.hostname is not None and parts.port is not None, url
        assert (parts.scheme == "https") == (context is not None), url
        reader, writer = await asyncio.open_connection(parts.hostname, parts.port, ssl=context)
        return cls(reader, writer, parts.netloc)

    async def post(self, path: str, body: bytes, content_type: str) -> tuple[int, bytes]:
        """(status, body) of one POST."""
        head = (f"POST {path} HTTP/1.1\r\nHost: {self._host}\r\n"
                f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n\r\n")
        if len(body) < 65536:
            self._writer.write(head.encode() + body)  # one segment for small requests
        else:
            self._writer.write(head.encode())
            self._writer.write(body)  # no copy of a large body
        await self._writer.drain()
        status_line, _, header_block = (await self._reader.readuntil(b"\r\n\r\n")).partition(
            b"\r\n")
        length = 0
        for line in header_block.split(b"\r\n"):
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding":
                raise RuntimeError("HttpConnection reads Content-Length responses only")
        return int(status_line.split()[1]), await self._reader.readexactly(length)

    async def close(self) -> None:
        self._writer.close()
        await self._writer.wait_closed()


@asynccontextmanager
async def http_connections(url: str, count: int, context: ssl.SSLContext | None = None,
                           ) -> AsyncIterator[list[HttpConnection]]:
    """``count`` connections, one for each concurrent task."""
    connections = [await HttpConnection.open(url, context) for _ in range(count)]
    try:
        yield connections
    finally:
        for connection in connections:
            await connection.close()


def threaded_closed_loop(op: Callable[[int, int], bool], *, writers: int,
                         duration_s: float) -> LoadResult:
    """``writers`` threads; thread ``n`` calls ``op(n, turn)`` for turn 0, 1, …
    and times it; an op returning False (it had to wait for room, say) is not
    counted."""
    stop = threading.Event()
    latencies: list[list[float]] = [[] for _ in range(writers)]

    def writer(n: int) -> None:
        turn = 0
        while not stop.is_set():
            t0 = time.perf_counter()
            if op(n, turn):
                latencies[n].append(time.perf_counter() - t0)
            turn += 1

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(writers)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    time.sleep(duration_s)  # the measurement window, not synchronisation
    stop.set()
    for t in threads:
        t.join()
    samples = [x for part in latencies for x in part]
    return LoadResult(len(samples), time.perf_counter() - started, samples)


def open_loop(submit: Callable[[float], None], *, rate_per_s: float, duration_s: float) -> int:
    """Call ``submit(scheduled_time)`` at ``rate_per_s`` for ``duration_s`` from
    this thread, on schedule whatever the system under test does (open loop:
    latency is then counted from the scheduled time, so a stalled pacer shows
    up as latency instead of hiding it).  Returns the number of submissions."""
    interval = 1.0 / rate_per_s
    started = time.perf_counter()
    n = 0
    while (scheduled := started + n * interval) < started + duration_s:
        delay = scheduled - time.perf_counter()
        if delay > 0:
            time.sleep(delay)  # pacing the open-loop load, not synchronisation
        submit(scheduled)
        n += 1
    return n
