"""Issue 31, item 5: would the machine's second core pay for append streams?

One ``ledgerd serve`` process spends about one core on 16 x 16 streams of 1 KiB:
the GIL makes its threads (the event loop with the WebSocket layer and the
engine's appends, the journal's threads) one core between them.  This bench
measures the layout the issue names, built as small as it can be and still keep
the durability contract, against the real server, alternating in one run:

* **engine process** (``python -m bench.split_bench engine``): the real engine
  (``Bookie`` on the scratch device, the service's settings); a Unix socket
  takes frames ``u32 length, u32 stream, u64 ledger, message`` (a stream message
  exactly as the client sent it), decodes each with ``streaming.decode_batch``,
  and appends what one read brought in with ``Bookie.append`` per stream (one
  run, as the real route submits); once the run's journal future resolves, one
  frame ``u32 length, u32 stream, i64 LAC, u32 count, (u64 first, u64 last) *
  count`` goes back.  Nothing is acknowledged before it is durable.
* **front process** (``python -m bench.split_bench front``): uvicorn with the
  service's WebSocket options, one route ``/api/v1/ledgers/{id}/entries/stream``
  that forwards each message to the engine (the frames of one loop turn in one
  write) and answers acks (``streaming.encode_acks``) as they come back, all
  acks ready in one turn in one message, as the real route groups them.

It leaves out what the real route does besides (passwords, windows,
idle close, errors, metrics), which is why a gain short of the issue's 1.3x
decides against the layout, and a gain above it says only that building it
whole is worth trying.  Rows: streams' entries/s of the split layout with the
real server's as limit, each process's CPU per entry, and the machine's busy
fraction (every CPU, from ``/proc/stat``) next to both.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import json
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from . import _native
from ._harness import Row, scratch_device, scratch_dir
from ._native import Load
from .http_bench import server_process

STREAMS, IN_FLIGHT, ENTRY_BYTES = 16, 16, 1024
DEVICE_BYTES = 1024 * 1024 * 1024
SETTINGS = {"WRITE_CACHE_SIZE": "256MiB", "JOURNAL_CAPACITY": "512MiB"}
_REQUEST = struct.Struct(">IIQ")  # length (of what follows), stream, ledger
_REQUEST_HEAD = struct.Struct(">IQ")  # a request frame without its length
_ACKS = struct.Struct(">IIqI")  # length, stream, LAC, count
_ACKS_HEAD = struct.Struct(">IqI")  # an acks frame without its length
_RANGE = struct.Struct(">QQ")
_LENGTH = struct.Struct(">I")


# --- the engine process ------------------------------------------------------------


def _frames(buffer: bytearray) -> Iterator[bytes]:
    """Whole frames at the head of ``buffer``, taken out of it."""
    at = 0
    while len(buffer) - at >= 4:
        (length,) = _LENGTH.unpack_from(buffer, at)
        if len(buffer) - at - 4 < length:
            break
        yield bytes(buffer[at + 4:at + 4 + length])
        at += 4 + length
    del buffer[:at]


class _JournalWatch:
    """What the engine process saw of its group commits: each run's time from its
    append to its durability, and how many distinct journal futures (groups)
    resolved the entries."""

    def __init__(self) -> None:
        self.latencies_s: list[float] = []
        self.groups: set[Future[Any]] = set()
        self.entries = 0

    def report(self) -> dict[str, float]:
        ordered = sorted(self.latencies_s) or [0.0]
        return {"journal_p50_ms": ordered[len(ordered) // 2] * 1e3,
                "journal_p90_ms": ordered[len(ordered) * 9 // 10] * 1e3,
                "entries_per_group": self.entries / max(1, len(self.groups))}


async def _serve_engine(socket_path: str, ready_path: str) -> None:
    from app import ServiceSettings
    from app.routes_stream import stream_limits
    from common.errors import WouldBlock
    from ledger import Batch, Bookie, Pending
    from ledger import BatchAddResult as Result
    from streaming import decode_batch

    service = ServiceSettings.load(None)
    limits = stream_limits(service)
    bookie = Bookie.open(service.to_node().engine)
    ledgers = [bookie.create_ledger(password="", metadata={}).result().ledger_id
               for _ in range(STREAMS)]
    loop = asyncio.get_running_loop()
    watch = _JournalWatch()

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        buffer = bytearray()

        def answer(stream: int, pendings: list[Pending[Result]]) -> None:
            results = [p.outcome() for p in pendings]
            body = b"".join(_RANGE.pack(r.first_entry_id, r.last_entry_id) for r in results)
            lac = results[-1].last_add_confirmed
            writer.write(_ACKS.pack(_ACKS_HEAD.size + len(body), stream, lac, len(results))
                         + body)

        def submit(stream: int, ledger_id: int, batches: list[Batch]) -> None:
            while batches:
                try:
                    pendings = bookie.append(ledger_id, batches, password="", block=False)
                except WouldBlock:  # full caches: rare here, and a prototype may wait
                    pendings = bookie.append(ledger_id, batches, password="")
                batches = batches[len(pendings):]
                appended_s = time.perf_counter()

                def resolved(future: Future[Any], done: list[Pending[Result]] = pendings,
                             appended_s: float = appended_s) -> None:
                    # On the journal's thread: list appends and set adds hold the GIL.
                    watch.latencies_s.append(time.perf_counter() - appended_s)
                    watch.groups.add(future)
                    loop.call_soon_threadsafe(answer, stream, done)

                pendings[-1].future.add_done_callback(resolved)

        while data := await reader.read(1 << 20):
            buffer += data
            runs: dict[int, tuple[int, list[Batch]]] = {}
            for frame in _frames(buffer):
                watch.entries += 1  # one entry per message in this bench
                stream, ledger_id = _REQUEST_HEAD.unpack_from(frame)
                batch = decode_batch(frame[_REQUEST_HEAD.size:], limits)
                runs.setdefault(stream, (ledger_id, []))[1].append(
                    (batch.first_entry_id, batch.payloads))
            for stream, (ledger_id, batches) in runs.items():
                submit(stream, ledger_id, batches)

    server = await asyncio.start_unix_server(connection, socket_path)
    Path(ready_path).write_text(json.dumps(ledgers))
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    async with server:
        await stop.wait()
    bookie.close()
    Path(ready_path).with_suffix(".watch.json").write_text(json.dumps(watch.report()))


# --- the front process -------------------------------------------------------------


class _EngineLink:
    """The one connection to the engine process, shared by every stream."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader, self._writer = reader, writer
        self._out: list[bytes] = []
        self._flush_scheduled = False
        self.streams: dict[int, Callable[[int, list[tuple[int, int]]], None]] = {}

    def send(self, stream: int, ledger_id: int, message: bytes) -> None:
        self._out += (_REQUEST.pack(_REQUEST_HEAD.size + len(message), stream, ledger_id), message)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        self._writer.write(b"".join(self._out))
        self._out.clear()

    async def read_acks(self) -> None:
        buffer = bytearray()
        while data := await self._reader.read(1 << 20):
            buffer += data
            for frame in _frames(buffer):
                stream, lac, count = _ACKS_HEAD.unpack_from(frame)
                ranges = [_RANGE.unpack_from(frame, _ACKS_HEAD.size + _RANGE.size * i)
                          for i in range(count)]
                handler = self.streams.get(stream)
                if handler is not None:
                    handler(lac, ranges)


def _front_app(socket_path: str) -> Any:
    from starlette.applications import Starlette
    from starlette.routing import WebSocketRoute
    from starlette.websockets import WebSocket

    from streaming import SUBPROTOCOL, encode_acks

    links: list[_EngineLink] = []
    tokens = itertools.count()

    async def stream(websocket: WebSocket) -> None:
        if not links:
            reader, writer = await asyncio.open_unix_connection(socket_path)
            link = _EngineLink(reader, writer)
            links.append(link)
            asyncio.get_running_loop().create_task(link.read_acks())
        link = links[0]
        await websocket.accept(subprotocol=SUBPROTOCOL)
        ledger_id = int(websocket.path_params["ledger_id"])
        token = next(tokens)
        seqs: collections.deque[int] = collections.deque()
        acks: list[tuple[int, int, int]] = []
        last = [-1]
        wake = asyncio.Event()

        def acked(lac: int, ranges: list[tuple[int, int]]) -> None:
            acks.extend((seqs.popleft(), first, end) for first, end in ranges)
            last[0] = max(last[0], lac)
            wake.set()

        async def send_acks() -> None:
            while True:
                await wake.wait()
                wake.clear()
                ready, acks[:] = list(acks), []
                await websocket.send_text(encode_acks(ready, last[0]))

        link.streams[token] = acked
        sender = asyncio.get_running_loop().create_task(send_acks())
        try:
            for seq in itertools.count():
                message = await websocket.receive()
                data = message.get("bytes")
                if data is None:
                    break
                seqs.append(seq)
                link.send(token, ledger_id, data)
        finally:
            sender.cancel()
            del link.streams[token]

    return Starlette(routes=[WebSocketRoute("/api/v1/ledgers/{ledger_id}/entries/stream",
                                            stream)])


def _serve_front(socket_path: str, port: int) -> None:
    import uvicorn

    from app import ServiceSettings
    from app.routes_stream import websocket_server_options

    options = websocket_server_options(ServiceSettings.load(None))
    uvicorn.run(_front_app(socket_path), host="127.0.0.1", port=port, log_config=None,
                access_log=False, lifespan="off", **options)


# --- the bench ---------------------------------------------------------------------


def _machine_busy() -> tuple[int, int]:
    with open("/proc/stat") as stat:
        fields = [int(f) for f in stat.readline().split()[1:]]
    return sum(fields), fields[3] + fields[4]


def _point(url: str, pids: list[int], ledgers: list[int],
           duration_s: float) -> tuple[Load, list[float], float]:
    """(load, CPU seconds of each of ``pids``, machine busy fraction)."""
    before = [_native.process_cpu_s(pid) for pid in pids]
    total0, idle0 = _machine_busy()
    load = _native.node_streams(url, ledgers=ledgers, in_flight=IN_FLIGHT, entries=1,
                                entry_bytes=ENTRY_BYTES, duration_s=duration_s)
    total1, idle1 = _machine_busy()
    cpu = [_native.process_cpu_s(pid) - b for pid, b in zip(pids, before, strict=True)]
    return load, cpu, 1 - (idle1 - idle0) / (total1 - total0)


def _single(device: Path, duration_s: float) -> tuple[Load, list[float], float]:
    from .peer_bench import _ledgers

    with scratch_dir() as data, server_process(data, device, SETTINGS) as server:
        assert server.process is not None
        return _point(server.url, [server.process.pid], _ledgers(server.url, STREAMS),
                      duration_s)


@contextlib.contextmanager
def _split_processes(device: Path, watch: dict[str, float],
                     ) -> Iterator[tuple[str, list[int], list[int]]]:
    """(URL, [engine pid, front pid], ledgers); ``watch`` gets the engine's
    :class:`_JournalWatch` report once it stopped."""
    from tools.local_server import REPO, ServerProcess

    with scratch_dir() as data:
        # The environment ledgerd serve would get with these settings (the two
        # processes read them as the service does); the server itself never starts.
        server = ServerProcess({**SETTINGS, "DATA_DIR": str(data / "data"),
                                "JOURNAL_DEVICE": str(device), "LOG_LEVEL": "WARNING"})
        env, port = server.environment(), server.port
        socket_path, ready = str(data / "engine.sock"), data / "ledgers.json"
        engine = subprocess.Popen([sys.executable, "-m", "bench.split_bench", "engine",
                                   socket_path, str(ready)], cwd=REPO, env=env)
        front: subprocess.Popen[bytes] | None = None
        try:
            _wait(lambda: ready.exists(), engine)
            front = subprocess.Popen([sys.executable, "-m", "bench.split_bench", "front",
                                      socket_path, str(port)], cwd=REPO, env=env)
            _wait(lambda: _listening(port), front)
            yield f"http://127.0.0.1:{port}", [engine.pid, front.pid], json.loads(
                ready.read_text())
        finally:
            for process in (front, engine):
                if process is not None:
                    process.terminate()
                    process.wait(30)
            report = ready.with_suffix(".watch.json")
            if report.exists():
                watch.update(json.loads(report.read_text()))


def _listening(port: int) -> bool:
    import socket

    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def _wait(ready: Callable[[], bool], process: subprocess.Popen[bytes],
          timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready():
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{process.args!r} did not start ({process.returncode})")
        time.sleep(0.05)  # polling another process's start


def _split(device: Path, duration_s: float,
           ) -> tuple[Load, list[float], float, dict[str, float]]:
    watch: dict[str, float] = {}
    with _split_processes(device, watch) as (url, pids, ledgers):
        load, cpu, busy = _point(url, pids, ledgers, duration_s)
    return load, cpu, busy, watch


def _raw_group_commit_ms(device: Path, group_bytes: int) -> float:
    """p50 of back-to-back O_DIRECT writes of one group's bytes (4 KiB aligned),
    each followed by fdatasync: what the device takes for one group commit."""
    from .raw_device import raw_durable_writes

    size = max(4096, -(-group_bytes // 4096) * 4096)
    latencies = sorted(raw_durable_writes(device, "direct_fdatasync", block_size=size,
                                          count=300, region=(0, 256 * size)))
    return latencies[len(latencies) // 2] * 1e3


def run(*, duration_s: float, rounds: int = 2) -> list[Row]:
    from statistics import median

    singles, splits = [], []
    with scratch_device(DEVICE_BYTES) as device:
        for _ in range(rounds):
            singles.append(_single(device, duration_s))
            splits.append(_split(device, duration_s))
        single = sorted(singles, key=lambda p: p[0].entries_per_s)[len(singles) // 2]
        split = sorted(splits, key=lambda p: p[0].entries_per_s)[len(splits) // 2]
        watch = split[3]
        # A journal record of one 1 KiB entry: its payload, the envelope and the
        # framing, about 1.1 KiB.
        raw_ms = _raw_group_commit_ms(device, int(watch.get("entries_per_group", 1) * 1130))
    params = {"streams": STREAMS, "in_flight": IN_FLIGHT, "entry": ENTRY_BYTES}

    def per_entry(cpu_s: float, load: Load) -> float:
        return cpu_s / (load.entries_per_s * load.duration_s) * 1e6

    return [
        Row("single_process_stream", dict(params), single[0].entries_per_s, "entries/s",
            extra={"server_us_per_entry": per_entry(single[1][0], single[0]),
                   "machine_busy": single[2], "client_cpu_s": single[0].client_cpu_s,
                   "p99_ms": single[0].p99_ms}),
        Row("split_stream", dict(params), split[0].entries_per_s, "entries/s",
            limit=single[0].entries_per_s, limit_name="ledgerd serve, one process, same run",
            extra={"engine_us_per_entry": per_entry(split[1][0], split[0]),
                   "front_us_per_entry": per_entry(split[1][1], split[0]),
                   "machine_busy": split[2], "client_cpu_s": split[0].client_cpu_s,
                   "p99_ms": split[0].p99_ms, "median_gain": median(
                       s[0].entries_per_s / o[0].entries_per_s
                       for s, o in zip(splits, singles, strict=True)),
                   **watch, "raw_group_commit_p50_ms": raw_ms}),
    ]


def main(argv: list[str]) -> None:
    role, socket_path, other = argv
    if role == "engine":
        import uvloop  # as ledgerd serve's loop

        uvloop.run(_serve_engine(socket_path, other))
    else:
        _serve_front(socket_path, int(other))


if __name__ == "__main__":
    main(sys.argv[1:])
