"""Ledger creation at the speed of a write (issue 28, item 4).

Creates are measured against single 1 KiB adds, the write they should cost
about as much as, at the same concurrency, in alternating rounds on the same
target so that drift weighs on both alike:

* ``http_create``: ``POST /api/v1/ledgers`` (a random 32-character password,
  no metadata) from 32 connections of the bench's minimal asyncio HTTP client
  against a real ``ledgerd serve``; limit: ``POST …/entries`` of 1 KiB on the
  same server from the same client.  ``client_cpu`` and ``server_cpu`` are the
  CPU seconds each process spent per second of the create rounds (2 CPUs are
  the machine's: what the client takes, the server cannot have).
* ``engine_create``: 32 threads calling ``Bookie.create_ledger`` and waiting
  for each to be durable; limit: 32 threads calling ``Bookie.add_entry`` of
  1 KiB likewise.  No HTTP: the engine's own ceiling.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import secrets
import time
from pathlib import Path

import httpx

from ledger import Bookie

from ._harness import Row, percentile
from ._load import closed_loop, http_connections, threaded_closed_loop
from .engine_bench import engine_settings
from .http_bench import server_process

CONCURRENCY = 32
ROUNDS = 3
ENTRY = b"c" * 1024
JSON = "application/json"
OCTETS = "application/octet-stream"


def _create_body() -> bytes:
    return json.dumps({"password": secrets.token_urlsafe(24)}).encode()


def _process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (every thread)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _own_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _round(url: str, path: str, content_type: str, body: bytes | None,
                 duration_s: float) -> tuple[int, float, list[float]]:
    """(requests, elapsed, latencies) of one closed-loop round; ``body`` None:
    a fresh create body per request."""
    async with http_connections(url, CONCURRENCY) as connections:

        async def post(n: int) -> None:
            status, answer = await connections[n].post(
                path, _create_body() if body is None else body, content_type)
            if status >= 300:
                raise RuntimeError(f"POST {path}: {status} {answer[:200]!r}")

        result = await closed_loop(post, concurrency=CONCURRENCY, duration_s=duration_s)
    return result.ops, result.elapsed_s, result.latencies_s


def _http(data_dir: Path, device: Path, duration_s: float) -> list[Row]:
    with server_process(data_dir, device) as server:
        assert server.process is not None
        pid = server.process.pid
        url = server.url
        lid = httpx.post(f"{url}/api/v1/ledgers", json={}).json()["ledger_id"]
        creates = [0, 0.0, 0.0, 0.0]  # requests, seconds, client CPU s, server CPU s
        adds = [0, 0.0]
        create_lat: list[float] = []
        add_lat: list[float] = []
        for _ in range(ROUNDS):
            own, theirs = _own_cpu_s(), _process_cpu_s(pid)
            n, elapsed, lat = asyncio.run(_round(url, "/api/v1/ledgers", JSON, None,
                                                 duration_s / ROUNDS))
            creates[0] += n
            creates[1] += elapsed
            creates[2] += _own_cpu_s() - own
            creates[3] += _process_cpu_s(pid) - theirs
            create_lat += lat
            n, elapsed, lat = asyncio.run(_round(url, f"/api/v1/ledgers/{lid}/entries", OCTETS,
                                                 ENTRY, duration_s / ROUNDS))
            adds[0] += n
            adds[1] += elapsed
            add_lat += lat
    add_row = Row("http_add_1KiB", {"conc": CONCURRENCY}, adds[0] / adds[1], "req/s",
                  extra={"p50_ms": percentile(add_lat, 50) * 1e3,
                         "p99_ms": percentile(add_lat, 99) * 1e3})
    create_row = Row("http_create", {"conc": CONCURRENCY}, creates[0] / creates[1], "req/s",
                     limit=add_row.value, limit_name="single 1 KiB adds, same server and "
                     "client, same concurrency, alternating",
                     extra={"p50_ms": percentile(create_lat, 50) * 1e3,
                            "p99_ms": percentile(create_lat, 99) * 1e3,
                            "client_cpu": creates[2] / creates[1],
                            "server_cpu": creates[3] / creates[1]})
    return [create_row, add_row]


def _engine(data_dir: Path, device: Path, duration_s: float) -> list[Row]:
    bookie = Bookie.open(engine_settings(data_dir, device))
    try:
        ledgers = [bookie.create_ledger(password="", metadata={}).result(10).ledger_id
                   for _ in range(CONCURRENCY)]

        def create(_writer: int, _i: int) -> bool:
            bookie.create_ledger(password=secrets.token_urlsafe(24), metadata={}).result(30)
            return True

        def add(writer: int, _i: int) -> bool:
            bookie.add_entry(ledgers[writer], ENTRY, password="").result(30)
            return True

        totals: dict[str, list[float]] = {"create": [0, 0.0], "add": [0, 0.0]}
        latencies: dict[str, list[float]] = {"create": [], "add": []}
        for _ in range(ROUNDS):
            for name, op in (("create", create), ("add", add)):
                result = threaded_closed_loop(op, writers=CONCURRENCY,
                                              duration_s=duration_s / ROUNDS)
                totals[name][0] += result.ops
                totals[name][1] += result.elapsed_s
                latencies[name] += result.latencies_s
    finally:
        bookie.close()
    add_row = Row("engine_add_1KiB", {"threads": CONCURRENCY},
                  totals["add"][0] / totals["add"][1], "ops/s",
                  extra={"p50_ms": percentile(latencies["add"], 50) * 1e3,
                         "p99_ms": percentile(latencies["add"], 99) * 1e3})
    create_row = Row("engine_create", {"threads": CONCURRENCY},
                     totals["create"][0] / totals["create"][1], "ops/s",
                     limit=add_row.value, limit_name="single 1 KiB adds, same bookie, same "
                     "thread count, alternating",
                     extra={"p50_ms": percentile(latencies["create"], 50) * 1e3,
                            "p99_ms": percentile(latencies["create"], 99) * 1e3})
    return [create_row, add_row]


def run(data_dir: Path, device: Path, engine_dir: Path, engine_device: Path, *,
        duration_s: float) -> list[Row]:
    started = time.perf_counter()
    rows = _http(data_dir, device, duration_s)
    rows += _engine(engine_dir, engine_device, duration_s)
    print(f"create suite: {time.perf_counter() - started:.1f} s")
    return rows
