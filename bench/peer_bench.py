"""ledgerd next to Redis, each driven by a native client that is not the bottleneck.

- Redis (Debian ``redis-server``, ``appendonly yes`` + ``appendfsync always``,
  started by :func:`bench.redis_bench.redis_server`) is driven by
  ``redis-benchmark`` (C, one thread): ``XADD key * d <payload>``, ``-P`` commands
  pipelined per connection.
- ``ledgerd serve`` (uvicorn) is driven by ``wrk`` (C + LuaJIT, one thread) for
  HTTP adds, and by ``bench/node/stream_load.mjs`` (Node.js, ``ws``) for append
  streams, one stream per ledger.

Every row carries the client's CPU seconds and the server's, both from /proc,
so a reader can see that neither client was near a core.  Points are taken
Redis first, then ledgerd, at each load, both servers up the whole time.

Rows (entries/s; ratio = ledgerd ÷ Redis at the same load):

- issue 18's table: single 1 KiB at 16 and 64 connections, single 16 KiB at 64,
  batches of 100 x 1 KiB and 100 x 16 KiB at 16 (Redis: pipelines of 100);
- append streams of one 1 KiB entry per message: 16 streams x 16 in flight
  against ``-c 16 -P 16``, one stream x 16 in flight against ``-c 1 -P 16``
  (target ≥ 1 each), each beside the same load against the stream's floor
  (``/api/v1/noop/stream``: the WebSocket layer, no engine), and one stream
  beside the durable floor too (``/api/v1/noop/durable-stream``: one write and
  fdatasync per acks message on the event loop's thread, no engine);
- ack p99 of 16 streams paced (open loop) at half the 16 x 16 rate, against twice
  the raw device's group-commit p99 at that rate (``bench.raw_device``, the journal
  bench's floor; target ratio ≤ 1), beside the floor route's p99 at that rate;
- HTTP batch p99 at 16 clients against five times its p50 (target ratio ≤ 1).
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from common.units import MiB

from . import _native
from ._harness import Row, percentile, scratch_device, scratch_dir
from ._native import Load
from .http_bench import FRAMES, OCTETS, server_process
from .raw_device import raw_group_commit
from .redis_bench import redis_server, redis_version

JOURNAL_CAPACITY_BYTES = 512 * MiB
DEVICE_BYTES = 1024 * MiB
# BENCH_ENDPOINTS: the stream's floor route (app/routes_bench_stream.py), nothing else.
LEDGERD_SETTINGS = {"WRITE_CACHE_SIZE": "256MiB", "JOURNAL_CAPACITY": "512MiB",
                    "BENCH_ENDPOINTS": "true"}
NOOP_STREAM_PATH = "/api/v1/noop/stream"
NOOP_DURABLE_STREAM_PATH = "/api/v1/noop/durable-stream"
STREAM_ENTRY_BYTES = 1024
STREAMS, IN_FLIGHT = 16, 16
REDIS_KEY = "bench"
# The 1-minute load average when the last run started: a shared machine makes
# every figure provisional, and the report says so.
_load_at_start: float | None = None


@dataclass(frozen=True)
class Point:
    entry_bytes: int
    clients: int
    batch: int  # entries per request (Redis: commands per pipeline)

    @property
    def params(self) -> dict[str, int]:
        return {"entry": self.entry_bytes, "conc": self.clients, "batch": self.batch}


ISSUE_POINTS = (Point(1024, 16, 1), Point(1024, 64, 1), Point(16384, 64, 1),
                Point(1024, 16, 100), Point(16384, 16, 100))


def describe() -> dict[str, str]:
    missing = _native.missing_tools()
    notes = {"clients": "redis-benchmark (C) for Redis; wrk -t1 (C/LuaJIT) for ledgerd HTTP; "
                        "Node.js 'ws' (bench/node) for append streams; client and server CPU "
                        "seconds from /proc next to every figure",
             "peer": f"Redis {redis_version() or '?'} (Debian), appendonly yes, appendfsync "
                     "always, AOF rewrite and RDB off, loopback, temp dir on the scratch file "
                     "system; ledgerd: `ledgerd serve`, journal on a loop device on the same "
                     "disk"}
    if missing:
        notes["missing"] = f"not installed: {', '.join(missing)} (scripts/install-bench.sh)"
    if _load_at_start is not None:
        cpus = os.cpu_count() or 1
        shared = _load_at_start > 0.5 * cpus
        notes["machine"] = (f"Load average {_load_at_start:.1f} on {cpus} CPUs when the run "
                            "started" + (": the machine was shared with other jobs, so these "
                                         "figures are provisional." if shared else "."))
    return notes


@contextlib.contextmanager
def _servers(data: Path, device: Path, redis_dir: Path) -> Iterator[tuple[str, int, int, int]]:
    """(ledgerd URL, ledgerd pid, Redis port, Redis pid)."""
    with server_process(data, device, LEDGERD_SETTINGS) as server, \
            redis_server(redis_dir) as port:
        info = _native.redis_cli(port, "INFO", "server")
        redis_pid = int(next(line.split(":")[1] for line in info.splitlines()
                             if line.startswith("process_id:")))
        assert server.process is not None
        yield server.url, server.process.pid, port, redis_pid


def _measured(pid: int, run: Callable[[], Load]) -> tuple[Load, float]:
    """(load, server CPU seconds during it)."""
    before = _native.process_cpu_s(pid)
    load = run()
    return load, _native.process_cpu_s(pid) - before


def _redis_point(port: int, pid: int, *, size: int, clients: int, pipeline: int,
                 duration_s: float) -> tuple[Load, float]:
    """redis-benchmark sized to run at least 0.6 x ``duration_s`` (it counts
    requests, not seconds): shorter runs only size the next one and are dropped."""
    requests = max(2000, 20 * clients * pipeline)
    for _ in range(4):
        try:
            load, cpu = _measured(pid, functools.partial(
                _native.redis_benchmark, port, key=REDIS_KEY, size=size, clients=clients,
                pipeline=pipeline, requests=requests))
        finally:
            _native.redis_cli(port, "UNLINK", REDIS_KEY)
        if load.duration_s >= 0.6 * duration_s:
            break
        requests = int(requests * 1.2 * duration_s / max(load.duration_s, 0.01))
    return load, cpu


def _ledgers(url: str, count: int) -> list[int]:
    with httpx.Client(base_url=url, timeout=30) as client:
        return [client.post("/api/v1/ledgers", json={}).json()["ledger_id"]
                for _ in range(count)]


def _delete(url: str, ledgers: list[int]) -> None:
    with httpx.Client(base_url=url, timeout=60) as client:
        for lid in ledgers:
            client.delete(f"/api/v1/ledgers/{lid}")


def _http_point(url: str, pid: int, point: Point, duration_s: float) -> tuple[Load, float]:
    (lid,) = _ledgers(url, 1)
    payload = b"h" * point.entry_bytes
    if point.batch == 1:
        target, body, kind = f"{url}/api/v1/ledgers/{lid}/entries", payload, OCTETS
    else:
        frames = b"".join(len(payload).to_bytes(4, "big") + payload for _ in range(point.batch))
        target, body, kind = f"{url}/api/v1/ledgers/{lid}/entries/batch", frames, FRAMES
    try:
        return _measured(pid, lambda: _native.wrk_post(
            target, body=body, content_type=kind, connections=point.clients,
            duration_s=duration_s, entries_per_request=point.batch))
    finally:
        _delete(url, [lid])


def _floor_point(url: str, pid: int, *, streams: int, duration_s: float,
                 path: str = NOOP_STREAM_PATH,
                 rate_per_s: float | None = None) -> tuple[Load, float]:
    """The same load against a stream's floor (app/routes_bench_stream.py):
    decoded and acknowledged, not appended; ``NOOP_DURABLE_STREAM_PATH``: after
    one write and fdatasync per acks message, on the event loop's thread."""
    return _measured(pid, lambda: _native.node_streams(
        url, ledgers=list(range(streams)), in_flight=IN_FLIGHT, entries=1,
        entry_bytes=STREAM_ENTRY_BYTES, duration_s=duration_s, path=path,
        rate_per_s=rate_per_s))


def _stream_point(url: str, pid: int, *, streams: int, duration_s: float,
                  rate_per_s: float | None = None) -> tuple[Load, float]:
    ledgers = _ledgers(url, streams)
    try:
        return _measured(pid, lambda: _native.node_streams(
            url, ledgers=ledgers, in_flight=IN_FLIGHT, entries=1,
            entry_bytes=STREAM_ENTRY_BYTES, duration_s=duration_s, rate_per_s=rate_per_s))
    finally:
        _delete(url, ledgers)


def _extra(load: Load, server_cpu_s: float) -> dict[str, float]:
    """A row's figures but entries/s, its value."""
    return {k: v for k, v in load.extra(server_cpu_s).items() if k != "entries_per_s"}


def _pair(name: str, params: dict[str, int], ours: tuple[Load, float],
          peer: tuple[Load, float], peer_name: str) -> list[Row]:
    peer_row = Row(f"redis_{name}", dict(params), peer[0].entries_per_s, "entries/s",
                   extra=_extra(*peer))
    row = Row(f"ledgerd_{name}", dict(params), ours[0].entries_per_s, "entries/s",
              limit=peer[0].entries_per_s, limit_name=peer_name, extra=_extra(*ours))
    return [peer_row, row]


def _issue_rows(url: str, pid: int, port: int, redis_pid: int,
                duration_s: float) -> list[Row]:
    rows: list[Row] = []
    for point in ISSUE_POINTS:
        peer = _redis_point(port, redis_pid, size=point.entry_bytes, clients=point.clients,
                            pipeline=point.batch, duration_s=duration_s)
        ours = _http_point(url, pid, point, duration_s)
        name = "http_add" if point.batch == 1 else "http_batch"
        peer_name = ("Redis XADD, redis-benchmark -c N" if point.batch == 1
                     else "Redis XADD, redis-benchmark -c N -P 100")
        rows += _pair(name, point.params, ours, peer, peer_name)
    return rows


def _stream_rows(url: str, pid: int, port: int, redis_pid: int,
                 duration_s: float) -> list[Row]:
    rows: list[Row] = []
    for streams in (STREAMS, 1):
        peer = _redis_point(port, redis_pid, size=STREAM_ENTRY_BYTES, clients=streams,
                            pipeline=IN_FLIGHT, duration_s=duration_s)
        ours = _stream_point(url, pid, streams=streams, duration_s=duration_s)
        floor, floor_cpu = _floor_point(url, pid, streams=streams, duration_s=duration_s)
        params = {"entry": STREAM_ENTRY_BYTES, "conc": streams, "in_flight": IN_FLIGHT}
        pair = _pair("stream", params, ours, peer,
                     f"Redis XADD, redis-benchmark -c N -P {IN_FLIGHT}; target ratio >= 1")
        pair[1].extra["of_floor"] = ours[0].entries_per_s / floor.entries_per_s
        rows += pair
        rows.append(Row("ledgerd_stream_floor", dict(params), floor.entries_per_s, "entries/s",
                        limit=peer[0].entries_per_s,
                        limit_name=f"Redis XADD, redis-benchmark -c N -P {IN_FLIGHT}: what "
                                   "this server's WebSocket layer reaches with no engine "
                                   "(/api/v1/noop/stream) against the peer",
                        extra=_extra(floor, floor_cpu)))
        if streams == 1:
            durable, durable_cpu = _floor_point(url, pid, streams=streams,
                                                duration_s=duration_s,
                                                path=NOOP_DURABLE_STREAM_PATH)
            pair[1].extra["of_durable_floor"] = \
                ours[0].entries_per_s / durable.entries_per_s
            rows.append(Row(
                "ledgerd_stream_durable_floor", dict(params), durable.entries_per_s,
                "entries/s", limit=peer[0].entries_per_s,
                limit_name=f"Redis XADD, redis-benchmark -c N -P {IN_FLIGHT}: what this "
                           "server's WebSocket layer reaches when each acks message waits "
                           "for one write and fdatasync on the event loop's thread, with no "
                           "engine and no hand-over (/api/v1/noop/durable-stream)",
                extra=_extra(durable, durable_cpu)))
    return rows


def _paced_rows(url: str, pid: int, device: Path, saturation_per_s: float,
                duration_s: float) -> list[Row]:
    rate = saturation_per_s / 2
    ours, server_cpu = _stream_point(url, pid, streams=STREAMS, duration_s=duration_s,
                                     rate_per_s=rate)
    floor = raw_group_commit(device, size=STREAM_ENTRY_BYTES, rate_per_s=rate,
                             duration_s=duration_s,
                             region=(JOURNAL_CAPACITY_BYTES + 8192,
                                     JOURNAL_CAPACITY_BYTES + 8192 + 128 * MiB))
    floor_p99_ms = percentile(floor.latencies_s, 99) * 1e3
    noop, noop_cpu = _floor_point(url, pid, streams=STREAMS, duration_s=duration_s,
                                  rate_per_s=rate)
    params = {"entry": STREAM_ENTRY_BYTES, "conc": STREAMS, "rate": int(rate)}
    raw = {"raw_p99_ms": floor_p99_ms, "raw_p50_ms": percentile(floor.latencies_s, 50) * 1e3,
           "raw_commit_p99_ms": percentile(floor.commits_s, 99) * 1e3}
    limit_name = "2 x raw group commit p99 at the same rate; target ratio <= 1"
    return [
        Row("ledgerd_stream_paced", params, ours.p99_ms, "p99 ms", limit=2 * floor_p99_ms,
            limit_name=limit_name, extra={**ours.extra(server_cpu), **raw}),
        Row("ledgerd_stream_paced_floor", dict(params), noop.p99_ms, "p99 ms",
            limit=2 * floor_p99_ms,
            limit_name=limit_name + ": the same paced load against /api/v1/noop/stream "
                       "(no engine, nothing written), the ceiling the WebSocket layer and "
                       "the client's pacing set on the target",
            extra={**noop.extra(noop_cpu), **raw}),
    ]


def _tail_rows(rows: list[Row]) -> list[Row]:
    """HTTP batch p99 at 16 clients against five times its p50."""
    out = []
    for row in rows:
        if row.name == "ledgerd_http_batch" and row.params["conc"] == 16:
            out.append(Row("ledgerd_http_batch_tail", dict(row.params), row.extra["p99_ms"],
                           "p99 ms", limit=5 * row.extra["p50_ms"],
                           limit_name="5 x the same run's p50; target ratio <= 1",
                           extra={"p50_ms": row.extra["p50_ms"]}))
    return out


def run(*, duration_s: float) -> list[Row]:
    global _load_at_start
    _load_at_start = os.getloadavg()[0]
    missing = _native.missing_tools()
    if missing:
        raise RuntimeError(f"not installed: {', '.join(missing)}; run scripts/install-bench.sh")
    with scratch_device(DEVICE_BYTES) as device, scratch_dir() as data, \
            scratch_dir() as redis_dir, _servers(data, device, redis_dir) as (
                url, pid, port, redis_pid):
        rows = _stream_rows(url, pid, port, redis_pid, duration_s)
        saturation = next(r.value for r in rows if r.name == "ledgerd_stream"
                          and r.params["conc"] == STREAMS)
        rows += _paced_rows(url, pid, device, saturation, duration_s)
        issue = _issue_rows(url, pid, port, redis_pid, duration_s)
    return [*rows, *issue, *_tail_rows(issue)]
