"""Closed-loop load: ``concurrency`` clients, each doing one operation after
another for ``duration_s``.  :func:`closed_loop` runs them as tasks of one
asyncio event loop (both sides of a comparison use it, so the load generators
are the same kind of Python client); :func:`threaded_closed_loop` as threads
calling the engine directly."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

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


async def closed_loop(op: Callable[[], Awaitable[None]], *, concurrency: int,
                      duration_s: float) -> LoadResult:
    latencies: list[float] = []
    started = time.perf_counter()
    deadline = started + duration_s

    async def worker() -> None:
        while time.perf_counter() < deadline:
            t0 = time.perf_counter()
            await op()
            latencies.append(time.perf_counter() - t0)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return LoadResult(len(latencies), time.perf_counter() - started, latencies)


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
