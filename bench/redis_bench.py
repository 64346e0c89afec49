"""ledgerd over HTTP side by side with its peer, Redis streams fsyncing every write.

Redis (Debian's ``redis-server``, installed by ``scripts/install-bench.sh``) is
started here on loopback with ``appendonly yes`` + ``appendfsync always`` in a
temp dir made by :func:`scratch_dir`, on the same file system that holds the
ledgerd journal's scratch device, so both pay the same disk's fsync; it is shut
down afterwards.  ledgerd runs as ``ledgerd serve`` (uvicorn) in a child process.

Both load generators are the same kind of client: Python asyncio in this
process, one task per concurrent client, one connection per task (a minimal
asyncio HTTP/1.1 client for ledgerd, ``bench._load.HttpConnection``; redis-py's
asyncio client for Redis).  Points are
interleaved (Redis, then ledgerd, at each size and concurrency) so noise from a
shared machine hits both alike.  Every row is MB/s of entry payload; each
ledgerd row's limit is the Redis row of the same point:

- single adds: ``POST …/entries`` vs ``XADD``;
- batches of 100: ``POST …/entries/batch`` (frames) vs 100 ``XADD`` in one
  non-transactional pipeline;
- range reads: one streamed ``GET …/entries`` (frames) vs ``XRANGE`` pages of
  1000.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import redis
import redis.asyncio as aredis

from tools.local_s3 import free_port

from ._harness import Row, scratch_device, scratch_dir
from ._load import HttpConnection, LoadResult, closed_loop, http_connections
from .http_bench import FRAMES, running_server

SIZES = (100, 1024, 16384)
CONCURRENCY = (1, 16, 64)
BATCH = 100
READ_SIZES = (1024, 16384)
XRANGE_PAGE = 1000
OCTETS = "application/octet-stream"
LEDGERD_SETTINGS = {"WRITE_CACHE_SIZE": "256MiB", "JOURNAL_CAPACITY": "512MiB"}
REDIS_CONF = """\
bind 127.0.0.1
port {port}
dir {dir}
daemonize no
protected-mode yes
appendonly yes
appendfsync always
auto-aof-rewrite-percentage 0
save ""
logfile {dir}/redis.log
"""


def redis_version() -> str | None:
    exe = shutil.which("redis-server")
    if exe is None:
        return None
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, check=True).stdout
    return out.split()[2].removeprefix("v=") if len(out.split()) > 2 else out.strip()


def describe() -> dict[str, str]:
    version = redis_version()
    if version is None:
        return {"peer": "redis-server not installed (run scripts/install-bench.sh as root): "
                        "Redis rows skipped"}
    return {"peer": f"Redis {version} (Debian redis-server), appendonly yes, appendfsync "
                    "always, AOF rewrite off, RDB off, loopback, temp dir on the scratch "
                    "file system",
            "load": "Python asyncio in the bench process, one task and one connection per "
                    "concurrent client, for both systems (httpx / redis-py asyncio)"}


@contextmanager
def redis_server(work_dir: Path) -> Iterator[int]:
    """A throw-away redis-server on 127.0.0.1; yields its port."""
    port = free_port()
    conf = work_dir / "redis.conf"
    conf.write_text(REDIS_CONF.format(port=port, dir=work_dir))
    proc = subprocess.Popen(["redis-server", str(conf)], stdout=subprocess.DEVNULL)
    client = redis.Redis(host="127.0.0.1", port=port)
    try:
        _wait_ping(client)
        yield port
    finally:
        with contextlib.suppress(redis.ConnectionError):  # SHUTDOWN drops the connection
            client.shutdown(nosave=True)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


def _wait_ping(client: redis.Redis, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if client.ping():
                return
        except redis.ConnectionError:
            pass
        time.sleep(0.05)  # polling readiness of a child process
    raise RuntimeError("redis-server did not answer PING")


async def redis_adds(port: int, *, size: int, concurrency: int, batch: int,
                     duration_s: float) -> LoadResult:
    pool = aredis.BlockingConnectionPool(host="127.0.0.1", port=port,
                                         max_connections=concurrency)
    client = aredis.Redis(connection_pool=pool)
    key, fields = f"adds-{size}-{concurrency}-{batch}", {"d": b"r" * size}

    async def xadd(_n: int) -> None:
        await client.xadd(key, fields)  # type: ignore[arg-type]

    async def pipelined(_n: int) -> None:
        pipe = client.pipeline(transaction=False)
        for _ in range(batch):
            pipe.xadd(key, fields)  # type: ignore[arg-type]
        await pipe.execute()

    try:
        return await closed_loop(xadd if batch == 1 else pipelined, concurrency=concurrency,
                                 duration_s=duration_s)
    finally:
        await client.unlink(key)
        await client.aclose()
        await pool.disconnect()


def _frames(payloads: list[bytes]) -> bytes:
    return b"".join(len(p).to_bytes(4, "big") + p for p in payloads)


async def _post(connection: HttpConnection, path: str, body: bytes, content_type: str,
                retries: list[int]) -> None:
    """POST, retrying back-pressure (503) after 10 ms; retries are counted."""
    while True:
        status, answer = await connection.post(path, body, content_type)
        if status < 300:
            return
        if status != 503:
            raise RuntimeError(f"POST {path}: {status} {answer[:200]!r}")
        retries.append(1)
        await asyncio.sleep(0.01)


async def ledgerd_adds(url: str, *, size: int, concurrency: int, batch: int,
                       duration_s: float) -> tuple[LoadResult, int]:
    """(load result, 503 retries) of single adds (batch 1) or frame batches."""
    retries: list[int] = []
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        lid = (await client.post("/api/v1/ledgers", json={})).json()["ledger_id"]
        if batch == 1:
            path, body, kind = f"/api/v1/ledgers/{lid}/entries", b"h" * size, OCTETS
        else:
            path, body, kind = (f"/api/v1/ledgers/{lid}/entries/batch",
                                _frames([b"h" * size] * batch), FRAMES)
        async with http_connections(url, concurrency) as connections:

            async def add(n: int) -> None:
                await _post(connections[n], path, body, kind, retries)

            result = await closed_loop(add, concurrency=concurrency, duration_s=duration_s)
        await client.delete(f"/api/v1/ledgers/{lid}")
    return result, len(retries)


async def redis_read(port: int, *, size: int, total_bytes: int) -> float:
    """MB/s of one client paging a stream of ``total_bytes`` with XRANGE."""
    client = aredis.Redis(host="127.0.0.1", port=port)
    key, fields = f"read-{size}", {"d": b"r" * size}
    try:
        for _ in range(max(1, total_bytes // (size * BATCH))):
            pipe = client.pipeline(transaction=False)
            for _ in range(BATCH):
                pipe.xadd(key, fields)  # type: ignore[arg-type]
            await pipe.execute()
        started, read, start = time.perf_counter(), 0, "-"
        while page := await client.xrange(key, min=start, max="+", count=XRANGE_PAGE):
            read += _payload_bytes(page)
            start = "(" + _last_id(page)
        elapsed = time.perf_counter() - started
        await client.unlink(key)
    finally:
        await client.aclose()
    return read / elapsed / 1e6


def _payload_bytes(page: Any) -> int:
    """Bytes of the ``d`` fields in one XRANGE reply: [(id, {b"d": payload}), ...]."""
    return sum(len(values[b"d"]) for _id, values in page)


def _last_id(page: Any) -> str:
    return bytes(page[-1][0]).decode()


async def ledgerd_read(url: str, *, size: int, total_bytes: int) -> float:
    """MB/s of one client streaming a ledger of ``total_bytes`` as frames."""
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        lid = (await client.post("/api/v1/ledgers", json={})).json()["ledger_id"]
        batch = _frames([b"h" * size] * BATCH)
        async with http_connections(url, 1) as (connection,):
            for _ in range(max(1, total_bytes // (size * BATCH))):
                await _post(connection, f"/api/v1/ledgers/{lid}/entries/batch", batch, FRAMES,
                            [])
        started, read = time.perf_counter(), 0
        async with client.stream("GET", f"/api/v1/ledgers/{lid}/entries",
                                 headers={"accept": FRAMES}) as response:
            async for chunk in response.aiter_bytes():
                read += len(chunk)
        elapsed = time.perf_counter() - started
        await client.delete(f"/api/v1/ledgers/{lid}")
    # frames carry 16 bytes of id/crc/length per entry: count payload bytes only
    payload = read * size // (size + 16)
    return payload / elapsed / 1e6


def _add_point(url: str, port: int | None, *, size: int, concurrency: int, batch: int,
               duration_s: float) -> list[Row]:
    params: dict[str, int] = {"conc": concurrency, "entry": size}
    if batch > 1:
        params["batch"] = batch
    names = ("redis_xadd", "ledgerd_add") if batch == 1 else ("redis_xadd_pipeline",
                                                              "ledgerd_batch_add")
    rows: list[Row] = []
    if port is not None:
        peer = asyncio.run(redis_adds(port, size=size, concurrency=concurrency, batch=batch,
                                      duration_s=duration_s))
        rows.append(peer.row(names[0], params, size * batch, entries_per_op=batch))
    ours, retries = asyncio.run(ledgerd_adds(url, size=size, concurrency=concurrency,
                                             batch=batch, duration_s=duration_s))
    row = ours.row(names[1], params, size * batch, entries_per_op=batch)
    row.extra["retries_503"] = retries
    if rows:
        row.limit, row.limit_name = rows[0].value, f"Redis {names[0]} (appendfsync always)"
    return [*rows, row]


def _read_point(url: str, port: int | None, *, size: int, total_bytes: int) -> list[Row]:
    params = {"entry": size, "bytes": total_bytes}
    rows: list[Row] = []
    if port is not None:
        mb_s = asyncio.run(redis_read(port, size=size, total_bytes=total_bytes))
        rows.append(Row("redis_xrange", params, mb_s, "MB/s"))
    mb_s = asyncio.run(ledgerd_read(url, size=size, total_bytes=total_bytes))
    row = Row("ledgerd_range_read", params, mb_s, "MB/s")
    if rows:
        row.limit, row.limit_name = rows[0].value, "Redis XRANGE"
    return [*rows, row]


def _points(url: str, port: int | None, *, duration_s: float, read_bytes: int) -> list[Row]:
    rows: list[Row] = []
    for batch in (1, BATCH):
        for size in SIZES:
            for concurrency in CONCURRENCY:
                rows += _add_point(url, port, size=size, concurrency=concurrency, batch=batch,
                                   duration_s=duration_s)
    for size in READ_SIZES:
        rows += _read_point(url, port, size=size, total_bytes=read_bytes)
    return rows


def run(*, duration_s: float, quick: bool) -> list[Row]:
    read_bytes = (8 if quick else 64) * 2**20
    with scratch_device(1024 * 2**20) as device, scratch_dir() as data, \
            running_server(data, device, LEDGERD_SETTINGS) as url:
        if redis_version() is None:
            return _points(url, None, duration_s=duration_s, read_bytes=read_bytes)
        with scratch_dir() as redis_dir, redis_server(redis_dir) as port:
            return _points(url, port, duration_s=duration_s, read_bytes=read_bytes)
