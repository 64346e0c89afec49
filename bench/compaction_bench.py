"""Compaction benchmarks: MB/s of live data moved (against a raw sequential
read of the device, the cost compaction cannot beat), and add latency while a
rate-limited compaction runs against add latency without one (target p99 at most 2x).

Data: interleaved ledgers (every entry log holds a slice of each), 80% of them
deleted, so only compaction, not log deletion, reclaims the space."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from pathlib import Path

from common.units import MiB
from compaction import CompactionSettings, GarbageCollector
from entrylog import EntryLogSettings
from ledger import Bookie, EngineSettings

from ._harness import Row
from .engine_bench import engine_adds, engine_settings
from .raw_device import raw_read_mb_s

LEDGERS, ENTRY = 100, 4096


def fill_interleaved(bookie: Bookie, total_bytes: int) -> list[int]:
    ids = [bookie.create_ledger(password="", metadata={}).result().ledger_id
           for _ in range(LEDGERS)]
    body = b"c" * ENTRY
    for _ in range(total_bytes // (ENTRY * LEDGERS)):
        futures = [bookie.add_entry(lid, body, password="") for lid in ids]
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
    rate = CompactionSettings().rate_bytes_per_s
    bookie = Bookie.open(compaction_settings(data_dir, device))
    try:
        fill_interleaved(bookie, total_bytes)
        quiet, _ = engine_adds(bookie, writers=4, size=1024, duration_s=duration_s)
        done = threading.Event()
        result: list[tuple[float, int, GarbageCollector]] = []

        def compact() -> None:
            result.append(compact_once(bookie, rate))
            done.set()

        worker = threading.Thread(target=compact)
        worker.start()
        busy, _ = engine_adds(bookie, writers=4, size=1024, duration_s=duration_s)
        overlapped = not done.is_set()
        worker.join()
    finally:
        bookie.close()
    elapsed, moved, _gc = result[0]
    quiet_p99, busy_p99 = quiet.extra["p99_ms"], busy.extra["p99_ms"]
    return [
        Row("add_p99_during_compaction", {"writers": 4, "entry": 1024,
                                          "rate_mib_s": rate // MiB, "overlapped": overlapped},
            busy_p99, "ms", limit=quiet_p99, limit_name="add p99 without compaction",
            extra={"p50_ms": busy.extra["p50_ms"], "quiet_p50_ms": quiet.extra["p50_ms"],
                   "adds_mb_s": busy.value}),
        Row("compaction_rate_limited", {"rate_mib_s": rate // MiB}, moved / elapsed / 1e6,
            "MB/s moved",
            extra={"run_s": elapsed}),
    ]
