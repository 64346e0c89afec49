"""The HTTP server, A/B: uvicorn (what ``ledgerd serve`` runs, with uvloop and
httptools) against granian (Rust, HTTP/1.1 + WebSockets, through
:mod:`bench._granian`), same app, same settings, same loads; and uvicorn on all
CPUs against uvicorn held to one (``taskset``, as an operator would run it): the
service's Python threads take turns on one GIL, and a turn handed to a thread
on another CPU costs a cross-CPU wake-up.

Both servers run the whole time, each on its own scratch device and data dir of
the same kind; the loads alternate between them in rounds, A B C then C B A, so that
a machine getting busier or quieter during the run favours neither.  Loads (the
native clients of :mod:`bench.peer_bench`):

- single 1 KiB adds, wrk at 16 and at 64 connections;
- batches of 100 x 1 KiB, wrk at 16 connections;
- append streams, one 1 KiB entry per message, 16 streams x 16 in flight
  (Node.js ``ws``).

Each row sums its rounds (entries/s over the rounds' total time; server and
client CPU seconds, the server's over its whole process tree) and gives the
median of the rounds' p50 and p99.  The granian and one-CPU rows' limit is
uvicorn's row.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from common.units import MiB
from tools.local_server import REPO, ServerProcess

from . import _native
from ._harness import Row, last_cpu, scratch_device, scratch_dir
from ._native import Load
from .http_bench import FRAMES, OCTETS
from .peer_bench import IN_FLIGHT, LEDGERD_SETTINGS, STREAM_ENTRY_BYTES, STREAMS
from .peer_bench import _delete as delete_ledgers
from .peer_bench import _ledgers as create_ledgers

DEVICE_BYTES = 1024 * MiB
ROUNDS = 3
SERVERS = ("uvicorn", "granian", "uvicorn_one_cpu")
# granian is adopted only if it beats uvicorn by this much in entries/s on every
# load, with a p99 no worse; less is within what a shared machine moves.
CLEAR_WIN_RATIO = 1.10
_load_average: dict[str, float] = {}


@dataclass(frozen=True)
class Workload:
    name: str
    entry_bytes: int
    clients: int
    batch: int  # entries per request; 0 = append streams

    @property
    def params(self) -> dict[str, int]:
        if self.batch == 0:
            return {"entry": self.entry_bytes, "conc": self.clients, "in_flight": IN_FLIGHT}
        return {"entry": self.entry_bytes, "conc": self.clients, "batch": self.batch}


WORKLOADS = (Workload("add", 1024, 16, 1), Workload("add", 1024, 64, 1),
             Workload("batch", 1024, 16, 100), Workload("stream", STREAM_ENTRY_BYTES, STREAMS, 0))


class GranianProcess(ServerProcess):
    """:class:`ServerProcess` running ``python -m bench._granian``."""

    def _spawn(self, stdout: IO[bytes] | int) -> None:
        self.process = subprocess.Popen(
            self.command([sys.executable, "-m", "bench._granian", "--host", "127.0.0.1",
                          "--port", str(self.port)]),
            cwd=REPO, env=self.environment(), stdout=stdout, stderr=subprocess.STDOUT)


def describe() -> dict[str, str]:
    notes = {"servers": _versions(),
             "clients": "wrk -t1 for HTTP adds and batches, Node.js 'ws' (bench/node) for "
                        "streams; client CPU from /proc, server CPU over the server's "
                        "process tree (granian's worker is a child process)",
             "rounds": f"{ROUNDS} rounds per load, A B C then C B A; values summed over rounds, "
                       "p50/p99 the median of the rounds'",
             "verdict rule": f"adopt granian only if entries/s ≥ {CLEAR_WIN_RATIO:.2f} x "
                             "uvicorn's with a p99 no higher, on every load, and the whole "
                             "test suite passes under it"}
    if _load_average:
        cpus = os.cpu_count() or 1
        start, end = _load_average.get("start", 0.0), _load_average.get("end", 0.0)
        shared = max(start, end) > 0.5 * cpus
        notes["machine"] = (f"Load average {start:.1f} at the start, {end:.1f} at the end, on "
                            f"{cpus} CPUs" + (": the machine was shared with other jobs, so "
                                              "these figures are provisional." if shared
                                              else "."))
    return notes


def _versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    def of(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "?"

    return (f"uvicorn {of('uvicorn')} (uvloop {of('uvloop')}, httptools {of('httptools')}; "
            f"`ledgerd serve`); granian {of('granian')} (ASGI, uvloop, HTTP/1.1, one worker; "
            "bench/_granian.py)")


@contextlib.contextmanager
def _server(kind: str, data: Path, device: Path) -> Iterator[ServerProcess]:
    settings = {"DATA_DIR": str(data), "JOURNAL_DEVICE": str(device),
                "ACCESS_LOG": "false", "LOG_LEVEL": "WARNING", **LEDGERD_SETTINGS}
    one = last_cpu() if kind == "uvicorn_one_cpu" else None  # the clients keep the others
    cpus = None if one is None else [one]
    server = (GranianProcess if kind == "granian" else ServerProcess)(settings, cpus=cpus)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _point(server: ServerProcess, work: Workload, duration_s: float) -> tuple[Load, float]:
    """One round of one workload: (load, server CPU seconds)."""
    assert server.process is not None
    pid, url = server.process.pid, server.url
    ledgers = create_ledgers(url, work.clients if work.batch == 0 else 1)
    run: Callable[[], Load]
    if work.batch == 0:
        def run() -> Load:
            return _native.node_streams(url, ledgers=ledgers, in_flight=IN_FLIGHT, entries=1,
                                        entry_bytes=work.entry_bytes, duration_s=duration_s)
    else:
        payload = b"h" * work.entry_bytes
        path = f"{url}/api/v1/ledgers/{ledgers[0]}/entries"
        if work.batch == 1:
            target, body, kind = path, payload, OCTETS
        else:
            body = b"".join(len(payload).to_bytes(4, "big") + payload
                            for _ in range(work.batch))
            target, kind = f"{path}/batch", FRAMES

        def run() -> Load:
            return _native.wrk_post(target, body=body, content_type=kind,
                                    connections=work.clients, duration_s=duration_s,
                                    entries_per_request=work.batch)
    try:
        before = _native.tree_cpu_s(pid)
        load = run()
        return load, _native.tree_cpu_s(pid) - before
    finally:
        delete_ledgers(url, ledgers)


def _summed(rounds: list[tuple[Load, float]]) -> tuple[float, dict[str, float]]:
    """(entries/s, extra) over the rounds of one server at one load."""
    seconds = sum(load.duration_s for load, _ in rounds)
    entries = sum(load.entries_per_s * load.duration_s for load, _ in rounds)
    server_cpu = sum(cpu for _, cpu in rounds)
    extra = {"p50_ms": statistics.median(load.p50_ms for load, _ in rounds),
             "p99_ms": statistics.median(load.p99_ms for load, _ in rounds),
             "p99_ms_max": max(load.p99_ms for load, _ in rounds),
             "client_cpu_s": sum(load.client_cpu_s for load, _ in rounds),
             "server_cpu_s": server_cpu,
             "server_us_per_entry": server_cpu / entries * 1e6 if entries else 0.0,
             "seconds": seconds}
    errors = sum(load.errors for load, _ in rounds)
    if errors:
        extra["errors"] = errors
    return entries / seconds if seconds else 0.0, extra


def _rows(work: Workload, results: dict[str, list[tuple[Load, float]]]) -> list[Row]:
    uvicorn_value, uvicorn_extra = _summed(results["uvicorn"])
    granian_value, granian_extra = _summed(results["granian"])
    pinned_value, pinned_extra = _summed(results["uvicorn_one_cpu"])
    for extra in (granian_extra, pinned_extra):
        extra["p99_vs_uvicorn"] = (extra["p99_ms"] / uvicorn_extra["p99_ms"]
                                   if uvicorn_extra["p99_ms"] else 0.0)
    name = f"{work.name}_{work.entry_bytes // 1024}KiB"
    return [Row(f"uvicorn_{name}", work.params, uvicorn_value, "entries/s",
                extra=uvicorn_extra),
            Row(f"granian_{name}", work.params, granian_value, "entries/s",
                limit=uvicorn_value, limit_name="uvicorn, same rounds", extra=granian_extra),
            Row(f"uvicorn_one_cpu_{name}", work.params, pinned_value, "entries/s",
                limit=uvicorn_value, limit_name="uvicorn on all CPUs, same rounds",
                extra=pinned_extra)]


def run(*, duration_s: float, quick: bool) -> list[Row]:
    _load_average.clear()
    _load_average["start"] = os.getloadavg()[0]
    missing = [t for t in _native.missing_tools() if not t.startswith("redis")]
    if missing:
        raise RuntimeError(f"not installed: {', '.join(missing)}; run scripts/install-bench.sh")
    rounds = 2 if quick else ROUNDS
    rows: list[Row] = []
    with contextlib.ExitStack() as stack:
        servers: dict[str, ServerProcess] = {}
        for kind in SERVERS:
            device = stack.enter_context(scratch_device(DEVICE_BYTES))
            data = stack.enter_context(scratch_dir())
            servers[kind] = stack.enter_context(_server(kind, data, device))
        for work in WORKLOADS:
            results: dict[str, list[tuple[Load, float]]] = {kind: [] for kind in SERVERS}
            for index in range(rounds):
                for kind in SERVERS if index % 2 == 0 else reversed(SERVERS):
                    results[kind].append(_point(servers[kind], work, duration_s))
            rows += _rows(work, results)
    _load_average["end"] = os.getloadavg()[0]
    return rows
