"""How cost grows, through the engine (``ledger.Bookie``, no HTTP):

- with the number of ledgers written concurrently: 16 writer threads adding
  1 KiB entries round-robin over N ledgers (entries/s and p99; the limit is the
  same load on one ledger);
- with the entry size, 100 B → 1 MiB: 16 writers, one ledger each (MB/s; the
  limit is raw 1 MiB O_DIRECT + fdatasync writes);
- with the data size: journal replay time against the bytes in the journal, and
  a forced major GC's time against the bytes stored (80% deleted, interleaved),
  each next to a raw sequential O_DIRECT read of as many bytes;
- with the ledgers held, idle (issue 28): an idle checkpoint, the worst add
  across checkpoints, an idle GC run, and 1,000 deletions committed with a read
  cache full of small entries (``python -m bench.scaling_bench held N …`` runs
  just these).
"""

from __future__ import annotations

import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

from common.units import KiB, MiB
from compaction import CompactionSettings, GarbageCollector
from entrylog import EntryLogSettings
from ledger import Bookie, CheckpointStep, EngineSettings
from tools.seed_ledgers import seed_idle_ledgers

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
    held_counts: tuple[int, ...] = (1_000, 10_000, 100_000)

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
                        (*scale.stored_bytes, 1024 * MiB, 2048 * MiB),
                        (*scale.held_counts, 1_000_000))
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
        bookie.append(mine[turn % len(mine)], [(None, (body,))], password="")[0].result()
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


HELD_ENTRY_LOG_BYTES = 1 * MiB  # a 100k-ledger bookie's entries fill several logs
HELD_DELETIONS = 1000
HELD_CACHED_ENTRIES = 300_000  # small entries in the read cache when they are deleted
HELD_CACHED_BYTES = 100


def _held_settings(data: Path, device: Path, count: int) -> EngineSettings:
    base = engine_bench.engine_settings(data, device, flush_interval_s=3600.0,
                                        read_cache=HELD_CACHED_ENTRIES * HELD_CACHED_BYTES * 2)
    # Room for one more ledger than held (MAX_LEDGERS is 1,000,000 by default).
    limits = replace(base.limits,
                     ledger_count_max=max(base.limits.ledger_count_max, count + 1000))
    return replace(base, limits=limits,
                   entry_log=EntryLogSettings(directory=data / "entrylogs",
                                              size_bytes_limit=HELD_ENTRY_LOG_BYTES))


class _FreezeTimer:
    """How long each checkpoint took from its call to the end of its freeze
    (the step under the add lock, see ledger/_checkpoint.py), by the step hook."""

    def __init__(self) -> None:
        self.frozen_at = 0.0
        self.longest_s = 0.0

    def hook(self, step: CheckpointStep) -> None:
        if step is CheckpointStep.FROZEN:
            self.frozen_at = time.perf_counter()

    def checkpoint(self, bookie: Bookie) -> float:
        """One checkpoint; returns its whole duration (s)."""
        began = time.perf_counter()
        bookie.checkpoint()
        self.longest_s = max(self.longest_s, self.frozen_at - began)
        return time.perf_counter() - began


def _adds_around(bookie: Bookie, lid: int, timer: _FreezeTimer, *, checkpoints: int,
                 spacing_s: float) -> tuple[float, int]:
    """(worst add latency s, adds) of one writer adding 100 B entries to ``lid``
    while this thread checkpoints ``checkpoints`` times (0: just waits as long)."""
    stop = threading.Event()
    worst = [0.0, 0.0]

    def writer() -> None:
        while not stop.is_set():
            began = time.perf_counter()
            bookie.append(lid, [(None, (b"a" * 100,))], password="")[0].result()
            worst[0] = max(worst[0], time.perf_counter() - began)
            worst[1] += 1

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        for _ in range(max(1, checkpoints)):
            time.sleep(spacing_s)
            if checkpoints:
                timer.checkpoint(bookie)
        time.sleep(spacing_s)
    finally:
        stop.set()
        thread.join()
    return worst[0], int(worst[1])


def _reader_stall(bookie: Bookie, key: tuple[int, int], work: Callable[[], object],
                  ) -> tuple[float, float]:
    """(seconds ``work()`` took, the longest read-cache lookup meanwhile, s)."""
    stop = threading.Event()
    longest = [0.0]
    cache = bookie.storage.read_cache

    def reader() -> None:
        while not stop.is_set():
            began = time.perf_counter()
            cache.get(*key)
            longest[0] = max(longest[0], time.perf_counter() - began)
            time.sleep(0.0005)

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        began = time.perf_counter()
        work()
        took = time.perf_counter() - began
    finally:
        stop.set()
        thread.join()
    return took, longest[0]


def held_point(count: int) -> list[Row]:
    """A bookie holding ``count`` idle ledgers (one 64 B entry each, written into
    its stores by ``tools.seed_ledgers``): an idle checkpoint, the worst add
    across checkpoints (next to the worst add over as long without one), an
    idle GC run, and HELD_DELETIONS deletions committed with a full read cache
    (next to the longest read-cache lookup meanwhile)."""
    with scratch_device(DEVICE_BYTES) as device, scratch_dir() as data:
        settings = _held_settings(data, device, count)
        ids = seed_idle_ledgers(settings, count)
        timer = _FreezeTimer()
        bookie = Bookie.open(settings, checkpoint_hook=timer.hook)
        try:
            bookie.checkpoint()
            idle = [timer.checkpoint(bookie) for _ in range(5)]
            idle_freeze = timer.longest_s
            lid = bookie.create_ledger(password="", metadata={}).result().ledger_id
            quiet, _ = _adds_around(bookie, lid, timer, checkpoints=0, spacing_s=1.0)
            timer.longest_s = 0.0
            worst, adds = _adds_around(bookie, lid, timer, checkpoints=5, spacing_s=0.2)
            busy_freeze = timer.longest_s
            gc = GarbageCollector(bookie, CompactionSettings(
                gc_wait_time_s=3600.0, minor_interval_s=3600.0, major_interval_s=3600.0,
                rate_bytes_per_s=0), disk_usage=lambda: 0.1, offload_deletion_lag_s=3600.0)
            first = gc.run_once().duration_s
            gc_idle = [gc.run_once().duration_s for _ in range(3)]
            # A full read cache of small entries, HELD_DELETIONS of its ledgers deleted.
            cache = bookie.storage.read_cache
            per = max(1, HELD_CACHED_ENTRIES // len(ids))
            cached = 0
            for n in range(HELD_CACHED_ENTRIES):
                cache.put(ids[n // per % len(ids)], n % per + 1, b"c" * HELD_CACHED_BYTES, 0)
                cached += 1
            doomed = ids[:min(HELD_DELETIONS, len(ids) // 2)]
            # Seeded with keyed password digests: a delete's check costs no KDF.
            pending = []
            for victim in doomed:
                pending.append(bookie.delete_ledger(victim, password=""))
            for p in pending:
                p.result()
            commit_s, stall_s = _reader_stall(bookie, (ids[-1], 1), bookie.checkpoint)
        finally:
            bookie.close()
    params = {"ledgers": count}
    return [
        Row("held_idle_checkpoint", params, statistics.median(idle) * 1e3, "ms",
            extra={"longest_freeze_ms": idle_freeze * 1e3}),
        Row("held_worst_add_across_checkpoints", {**params, "checkpoints": 5},
            worst * 1e3, "ms", limit=quiet * 1e3, limit_name="worst add, no checkpoint",
            extra={"adds": adds, "longest_freeze_ms": busy_freeze * 1e3}),
        Row("held_idle_gc_run", params, statistics.median(gc_idle) * 1e3, "ms",
            extra={"first_run_ms": first * 1e3}),
        Row("held_deletions_committed", {**params, "deleted": len(doomed),
                                         "cached_entries": cached},
            commit_s * 1e3, "ms", extra={"longest_cache_lookup_ms": stall_s * 1e3}),
    ]


def run(*, duration_s: float, raw_1mib_mb_s: float, scale: Scale) -> list[Row]:
    return [*(row for n in scale.held_counts for row in held_point(n)),
            *ledger_counts(scale.ledger_counts, duration_s=duration_s),
            *entry_sizes(scale.entry_sizes, duration_s=duration_s, raw_1mib_mb_s=raw_1mib_mb_s),
            *journal_replays(scale.journal_bytes),
            *(gc_point(n) for n in scale.stored_bytes)]


if __name__ == "__main__":
    # python -m bench.scaling_bench held 1000 10000 100000: the held-ledgers rows only.
    if sys.argv[1:2] == ["held"]:
        for n in map(int, sys.argv[2:]):
            for row in held_point(n):
                print(row.name, row.params, f"{row.value:.2f} {row.unit}",
                      f"limit={row.limit:.2f}" if row.limit is not None else "",
                      {k: round(v, 2) for k, v in row.extra.items()}, flush=True)
