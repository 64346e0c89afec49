"""HTTP benchmarks against a real uvicorn server (``ledgerd serve``) on loopback.

Single-entry adds at concurrency 1/16/64 are compared with ``POST /api/v1/noop``
on the same server with the same client (the floor an HTTP request costs here),
in alternating rounds so that drift (the host, a checkpoint left over from the
previous load) weighs on both alike; 1 MiB batch adds likewise alternate with raw
1 MiB O_DIRECT + fdatasync writes to a second device on the same disk (this
host's cache makes that limit swing 2x between minutes);
range reads (``application/x-ledgerd-frames``) are reported in MB/s.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from common.units import MiB
from tools.local_server import ServerProcess

from ._harness import Row, percentile
from ._load import closed_loop, http_connections
from .raw_device import raw_write_mb_s

FRAMES = "application/x-ledgerd-frames"
OCTETS = "application/octet-stream"
# 1 MiB batches in flight: one client, a few, and enough to keep the journal's
# group commit full while others are on the wire.
BATCH_CONCURRENCY = (1, 4, 16)
# No-op and add rounds alternate; each gets duration_s / ROUNDS.
ROUNDS = 3
RAW_REGION_BYTES = 256 * MiB  # the raw writes wrap within the second device


@contextmanager
def server_process(data_dir: Path, device: Path,
                   settings: dict[str, str] | None = None) -> Iterator[ServerProcess]:
    """``ledgerd serve`` in a child process; ``settings`` override the
    ``LEDGERD_*`` variables set here (e.g. ``{"WRITE_CACHE_SIZE": "256MiB"}``)."""
    defaults = {"DATA_DIR": str(data_dir), "JOURNAL_DEVICE": str(device),
                "JOURNAL_CAPACITY": "256MiB", "WRITE_CACHE_SIZE": "64MiB",
                "ACCESS_LOG": "false", "LOG_LEVEL": "WARNING",
                "BENCH_ENDPOINTS": "true"}  # POST /api/v1/noop, the HTTP floor
    server = ServerProcess({**defaults, **(settings or {})})
    server.start()
    try:
        yield server
    finally:
        server.stop()


@contextmanager
def running_server(data_dir: Path, device: Path,
                   settings: dict[str, str] | None = None) -> Iterator[str]:
    """The URL of :func:`server_process`."""
    with server_process(data_dir, device, settings) as server:
        yield server.url


async def _load(url: str, path: str, body: bytes, concurrency: int, duration_s: float,
                content_type: str) -> tuple[int, list[float]]:
    async with http_connections(url, concurrency) as connections:

        async def post(n: int) -> None:
            status, answer = await connections[n].post(path, body, content_type)
            if status >= 300:
                raise RuntimeError(f"POST {path}: {status} {answer[:200]!r}")

        result = await closed_loop(post, concurrency=concurrency, duration_s=duration_s)
    return result.ops, result.latencies_s


async def _alternating(url: str, paths: tuple[str, str], body: bytes, concurrency: int,
                       duration_s: float) -> list[tuple[int, list[float]]]:
    """(count, latencies) for each of ``paths``, loaded in ``ROUNDS`` alternating
    rounds of ``duration_s / ROUNDS`` each."""
    totals: list[tuple[int, list[float]]] = [(0, []), (0, [])]
    for _ in range(ROUNDS):
        for i, path in enumerate(paths):
            n, lat = await _load(url, path, body, concurrency, duration_s / ROUNDS,
                                 OCTETS)
            totals[i] = (totals[i][0] + n, totals[i][1] + lat)
    return totals


def _row(name: str, params: dict[str, object], count: int, lat: list[float], size: int,
         duration_s: float) -> Row:
    return Row(name, dict(params), count / duration_s, "req/s",
               extra={"MB_s": count * size / duration_s / 1e6,
                      "p50_ms": percentile(lat, 50) * 1e3, "p99_ms": percentile(lat, 99) * 1e3})


def _batches_against_raw(url: str, lid: int, raw_device: Path, concurrency: int,
                         duration_s: float) -> Row:
    """1 MiB batch adds (64 frames of 16 KiB) and raw 1 MiB writes, alternating."""
    entry = b"b" * 16384
    frames = b"".join(len(entry).to_bytes(4, "big") + entry for _ in range(64))
    count = 0
    latencies: list[float] = []
    raw: list[float] = []
    for _ in range(ROUNDS):
        raw.append(raw_write_mb_s(raw_device, MiB, total_bytes=1 << 40,
                                  region_bytes=RAW_REGION_BYTES,
                                  time_s_max=duration_s / ROUNDS)[0])
        n, lat = asyncio.run(_load(url, f"/api/v1/ledgers/{lid}/entries/batch", frames,
                                   concurrency, duration_s / ROUNDS, FRAMES))
        count, latencies = count + n, latencies + lat
    batch = _row("http_batch_1MiB", {"conc": concurrency}, count, latencies, len(frames),
                 duration_s)
    batch.value, batch.unit = batch.extra.pop("MB_s"), "MB/s"
    batch.limit = sum(raw) / len(raw)  # equal time slices: the mean rate is the total's
    batch.limit_name = "raw 1MiB O_DIRECT+fdatasync, alternating"
    return batch


def run(data_dir: Path, device: Path, raw_device: Path, *, duration_s: float) -> list[Row]:
    rows: list[Row] = []
    with running_server(data_dir, device) as url:
        lid = httpx.post(f"{url}/api/v1/ledgers", json={}).json()["ledger_id"]
        body = b"h" * 1024
        for conc in (1, 16, 64):
            (n_noop, lat_noop), (n, lat) = asyncio.run(_alternating(
                url, ("/api/v1/noop", f"/api/v1/ledgers/{lid}/entries"), body, conc,
                duration_s))
            floor = _row("http_noop", {"conc": conc}, n_noop, lat_noop, len(body), duration_s)
            row = _row("http_add_1KiB", {"conc": conc}, n, lat, len(body), duration_s)
            row.limit, row.limit_name = floor.value, "noop endpoint req/s"
            rows += [floor, row]
        for conc in BATCH_CONCURRENCY:
            rows.append(_batches_against_raw(url, lid, raw_device, conc, duration_s))
        started = time.perf_counter()
        total = 0
        with httpx.stream("GET", f"{url}/api/v1/ledgers/{lid}/entries",
                          headers={"accept": FRAMES}, timeout=120) as r:
            for chunk in r.iter_bytes():
                total += len(chunk)
        elapsed = time.perf_counter() - started
        rows.append(Row("http_range_read", {"bytes": total}, total / elapsed / 1e6, "MB/s"))
    return rows
