"""Compaction benchmarks: MB/s of live data moved (against a raw sequential
read of the device, the cost compaction cannot beat), and add latency while a
rate-limited compaction runs against add latency without one, in alternating
windows (target p99 at most 2x).

Data: interleaved ledgers (every entry log holds a slice of each), 80% of them
deleted, so only compaction, not log deletion, reclaims the space."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from common.units import MiB
from compaction import CompactionSettings, GarbageCollector
from entrylog import EntryLogSettings
from ledger import Bookie, EngineSettings

from ._harness import Row, percentile
from .engine_bench import engine_settings
from .raw_device import raw_read_mb_s

LEDGERS, ENTRY = 100, 4096
ROUNDS = 3  # quiet and busy windows, alternating


def fill_interleaved(bookie: Bookie, total_bytes: int) -> list[int]:
    ids = [bookie.create_ledger(password="", metadata={}).result().ledger_id
           for _ in range(LEDGERS)]
    body = b"c" * ENTRY
    for _ in range(total_bytes // (ENTRY * LEDGERS)):
        futures = [bookie.append(lid, [(None, (body,))], password="")[0] for lid in ids]
        for f in futures:
            f.result()
    for lid in ids:
        bookie.close_ledger(lid, password="").result()
    for lid in ids[: LEDGERS * 4 // 5]:
        bookie.delete_ledger(lid, password="").result()
    bookie.checkpoint()
    return ids


def compaction_settings(data_dir: Path, device: Path,
                        entry_log_bytes: int = 32 * MiB,
                        write_cache_bytes: int = 64 * MiB) -> EngineSettings:
    """Flushes sort by ledger, so a log mixes every ledger only when it holds
    several flushes: keep ``write_cache_bytes`` well under ``entry_log_bytes``."""
    base = engine_settings(data_dir, device, write_cache=write_cache_bytes)
    return replace(base, entry_log=EntryLogSettings(directory=data_dir / "entrylogs",
                                                    size_bytes_limit=entry_log_bytes))


def compact_once(bookie: Bookie, rate: int) -> tuple[float, int, GarbageCollector]:
    gc = GarbageCollector(bookie, CompactionSettings(rate_bytes_per_s=rate),
                          disk_usage=lambda: 0.1)
    started = time.perf_counter()
    report = gc.run_once(forced=True, force_major=True)
    return time.perf_counter() - started, report.moved_bytes, gc


def run(data_dir: Path, device: Path, *, duration_s: float,
        total_bytes: int = 256 * MiB) -> list[Row]:
    rows: list[Row] = []
    bookie = Bookie.open(compaction_settings(data_dir / "a", device))
    try:
        fill_interleaved(bookie, total_bytes)
        elapsed, moved, _gc = compact_once(bookie, rate=0)
    finally:
        bookie.close()
    raw = raw_read_mb_s(device, total_bytes)
    rows.append(Row("compaction_unthrottled", {"stored_mib": total_bytes // MiB, "live": "20%"},
                    moved / elapsed / 1e6, "MB/s moved",
                    extra={"run_s": elapsed, "moved_mb": moved / 1e6}))
    # Every stored byte is read to find the live fifth: the scan is the real work.
    rows.append(Row("compaction_scan", {"stored_mib": total_bytes // MiB},
                    total_bytes / elapsed / 1e6, "MB/s read", limit=raw,
                    limit_name="raw sequential O_DIRECT read"))
    rows.extend(_latency_during(data_dir / "b", device, duration_s, total_bytes))
    return rows


def _latency_during(data_dir: Path, device: Path, duration_s: float,
                    total_bytes: int) -> list[Row]:
    """Add latency in alternating windows, quiet then busy, ``ROUNDS`` of each: a
    busy window is one rate-limited compaction run cut at ``duration_s`` by its
    run-time limit (the next run goes on where it stopped), so a machine getting
    busier or quieter during the run weighs on both kinds of window alike."""
    rate = CompactionSettings().rate_bytes_per_s
    settings = CompactionSettings(rate_bytes_per_s=rate, run_time_s_max=duration_s)
    bookie = Bookie.open(compaction_settings(data_dir, device))
    try:
        fill_interleaved(bookie, total_bytes)
        gc = GarbageCollector(bookie, settings, disk_usage=lambda: 0.1)
        with _timed_adds(bookie, writers=4, size=1024) as adds:
            quiet, busy = [], []
            moved, busy_s = 0, 0.0
            for _ in range(ROUNDS):
                started = time.perf_counter()
                time.sleep(duration_s)  # the quiet window, not synchronisation
                quiet.append((started, time.perf_counter()))
                started = time.perf_counter()
                moved += gc.run_once(forced=True, force_major=True).moved_bytes
                busy.append((started, time.perf_counter()))
                busy_s += busy[-1][1] - started
    finally:
        bookie.close()
    quiet_lat, busy_lat = adds.within(quiet), adds.within(busy)
    quiet_p99, busy_p99 = percentile(quiet_lat, 99) * 1e3, percentile(busy_lat, 99) * 1e3
    # Every busy window was a run cut by its time limit: compaction ran throughout.
    overlapped = all(end - begin >= 0.9 * duration_s for begin, end in busy)
    return [
        Row("add_p99_during_compaction", {"writers": 4, "entry": 1024,
                                          "rate_mib_s": rate // MiB, "overlapped": overlapped},
            busy_p99, "ms", limit=quiet_p99,
            limit_name=f"add p99 without compaction, alternating windows ({ROUNDS} each)",
            extra={"p50_ms": percentile(busy_lat, 50) * 1e3,
                   "quiet_p50_ms": percentile(quiet_lat, 50) * 1e3,
                   "adds": len(busy_lat), "quiet_adds": len(quiet_lat),
                   "load_average": os.getloadavg()[0]}),
        Row("compaction_rate_limited", {"rate_mib_s": rate // MiB}, moved / busy_s / 1e6,
            "MB/s moved", extra={"run_s": busy_s}),
    ]


class _TimedAdds:
    """Writer threads adding until stopped; each add's start and latency."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, float]] = []

    def within(self, windows: list[tuple[float, float]]) -> list[float]:
        """Latencies of the adds that started inside one of ``windows``."""
        return [lat for t, lat in self.samples
                if any(begin <= t < end for begin, end in windows)]


@contextmanager
def _timed_adds(bookie: Bookie, *, writers: int, size: int) -> Iterator[_TimedAdds]:
    lids = [bookie.create_ledger(password="", metadata={}).result().ledger_id
            for _ in range(writers)]
    body = b"e" * size
    stop = threading.Event()
    parts: list[list[tuple[float, float]]] = [[] for _ in range(writers)]

    def writer(n: int) -> None:
        while not stop.is_set():
            t0 = time.perf_counter()
            bookie.append(lids[n], [(None, (body,))], password="")[0].result()
            parts[n].append((t0, time.perf_counter() - t0))

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(writers)]
    for t in threads:
        t.start()
    result = _TimedAdds()
    try:
        yield result
    finally:
        stop.set()
        for t in threads:
            t.join()
        result.samples = [x for part in parts for x in part]
