"""How cost grows, through the engine (``ledger.Bookie``, no HTTP):

- with the number of ledgers written concurrently: 16 writer threads adding
  1 KiB entries round-robin over N ledgers (entries/s and p99; the limit is the
  same load on one ledger);
- with the entry size, 100 B → 1 MiB: 16 writers, one ledger each (MB/s; the
  limit is raw 1 MiB O_DIRECT + fdatasync writes);
- with the data size: journal replay time against the bytes in the journal, and
  a forced major GC's time against the bytes stored (80% deleted, interleaved),
  each next to a raw sequential O_DIRECT read of as many bytes.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from common.units import KiB, MiB
from ledger import Bookie

from . import compaction_bench, engine_bench
from ._harness import Row, percentile, scratch_device, scratch_dir
from ._load import threaded_closed_loop
from .raw_device import raw_read_mb_s

WRITERS = 16
LEDGER_ENTRY = 1024
DEVICE_BYTES = 1024 * MiB
GC_ENTRY_LOG_BYTES = 8 * MiB  # small logs, so the number GC handles grows with the data
GC_WRITE_CACHE_BYTES = 2 * MiB  # several flushes per log: every log holds every ledger


@dataclass(frozen=True)
class Scale:
    ledger_counts: tuple[int, ...]
    entry_sizes: tuple[int, ...]
    journal_bytes: tuple[int, ...]
    stored_bytes: tuple[int, ...]

    @classmethod
    def pick(cls, *, quick: bool, big: bool) -> Scale:
        if quick:
            scale = cls((1, 100, 1000), (100, 16 * KiB, 1 * MiB), (16 * MiB, 64 * MiB),
                        (32 * MiB, 64 * MiB))
        else:
            scale = cls((1, 10, 100, 1000, 10_000),
                        (100, 1 * KiB, 16 * KiB, 64 * KiB, 256 * KiB, 1 * MiB),
                        (32 * MiB, 64 * MiB, 128 * MiB), (64 * MiB, 128 * MiB, 256 * MiB))
        if big:
            scale = cls(scale.ledger_counts, scale.entry_sizes,
                        (*scale.journal_bytes, 512 * MiB, 1024 * MiB),
                        (*scale.stored_bytes, 1024 * MiB, 2048 * MiB))
        return scale


def round_robin_adds(bookie: Bookie, ledger_ids: list[int], *, size: int,
                     duration_s: float) -> tuple[int, float, list[float]]:
    """(adds, elapsed s, latencies s) of WRITERS threads, writer n adding to
    ledgers n, n + WRITERS, … in turn (all to the one ledger when there is one)."""
    body = b"n" * size
    assigned = [ledger_ids[n::WRITERS] or [ledger_ids[n % len(ledger_ids)]]
                for n in range(WRITERS)]

    def add(n: int, turn: int) -> bool:
        mine = assigned[n]
        bookie.add_entry(mine[turn % len(mine)], body, password="").result()
        return True

    load = threaded_closed_loop(add, writers=WRITERS, duration_s=duration_s)
    return load.ops, load.elapsed_s, load.latencies_s


def create_ledgers(bookie: Bookie, count: int) -> tuple[list[int], float]:
    """(ids, seconds per ledger): each create pays one scrypt of the password,
    so they are spread over one thread per CPU (hashlib releases the GIL)."""
    started = time.perf_counter()
    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        infos = list(pool.map(lambda _: bookie.create_ledger(password="", metadata={}).result(),
                              range(count)))
    return [i.ledger_id for i in infos], (time.perf_counter() - started) / count


def ledger_counts(counts: tuple[int, ...], *, duration_s: float) -> list[Row]:
    """One bookie holding max(counts) ledgers; point N writes to the first N."""
    rows: list[Row] = []
    with scratch_device(DEVICE_BYTES) as device, scratch_dir() as data:
        bookie = Bookie.open(engine_bench.engine_settings(data, device))
        try:
            ids, create_s = create_ledgers(bookie, max(counts))
            for count in counts:
                adds, elapsed, lat = round_robin_adds(bookie, ids[:count], size=LEDGER_ENTRY,
                                                      duration_s=duration_s)
                rows.append(Row(
                    "round_robin_add",
                    {"ledgers": count, "writers": WRITERS, "entry": LEDGER_ENTRY},
                    adds / elapsed, "entries/s",
                    extra={"MB_s": adds * LEDGER_ENTRY / elapsed / 1e6,
                           "p50_ms": percentile(lat, 50) * 1e3,
                           "p99_ms": percentile(lat, 99) * 1e3,
                           "create_ms_per_ledger": create_s * 1e3}))
        finally:
            bookie.close()
    for row in rows:
        row.limit, row.limit_name = rows[0].value, f"same load on {counts[0]} ledger(s)"
    return rows


def entry_sizes(sizes: tuple[int, ...], *, duration_s: float, raw_1mib_mb_s: float) -> list[Row]:
    rows: list[Row] = []
    with scratch_device(DEVICE_BYTES) as device, scratch_dir() as data:
        bookie = Bookie.open(engine_bench.engine_settings(data, device, write_cache=256 * MiB))
        try:
            for size in sizes:
                row, _lid = engine_bench.engine_adds(bookie, writers=WRITERS, size=size,
                                                     duration_s=duration_s)
                row.name = "entry_size_add"
                row.limit, row.limit_name = raw_1mib_mb_s, "raw 1MiB O_DIRECT+fdatasync"
                rows.append(row)
        finally:
            bookie.close()
    return rows


def journal_replays(sizes: tuple[int, ...]) -> list[Row]:
    rows: list[Row] = []
    for total in sizes:
        device_bytes = engine_bench.replay_device_bytes(total)
        with scratch_device(device_bytes) as device, scratch_dir() as data:
            rows += engine_bench.replay(data, device, total_bytes=total)
    return rows


def gc_point(stored_bytes: int) -> Row:
    """A forced major GC over ``stored_bytes`` of interleaved ledgers, 80% deleted."""
    with scratch_device(DEVICE_BYTES) as device, scratch_dir() as data:
        settings = compaction_bench.compaction_settings(data, device,
                                                        entry_log_bytes=GC_ENTRY_LOG_BYTES,
                                                        write_cache_bytes=GC_WRITE_CACHE_BYTES)
        bookie = Bookie.open(settings)
        try:
            compaction_bench.fill_interleaved(bookie, stored_bytes)
            run_s, moved, _gc = compaction_bench.compact_once(bookie, rate=0)
        finally:
            bookie.close()
        raw_mb_s = raw_read_mb_s(device, min(stored_bytes, DEVICE_BYTES))
    return Row("gc_major", {"stored_bytes": stored_bytes, "live": "20%"},
               stored_bytes / run_s / 1e6, "MB/s scanned", limit=raw_mb_s,
               limit_name="raw sequential O_DIRECT read",
               extra={"run_s": run_s, "raw_read_s": stored_bytes / raw_mb_s / 1e6,
                      "moved_mb": moved / 1e6})


def run(*, duration_s: float, raw_1mib_mb_s: float, scale: Scale) -> list[Row]:
    return [*ledger_counts(scale.ledger_counts, duration_s=duration_s),
            *entry_sizes(scale.entry_sizes, duration_s=duration_s, raw_1mib_mb_s=raw_1mib_mb_s),
            *journal_replays(scale.journal_bytes),
            *(gc_point(n) for n in scale.stored_bytes)]
