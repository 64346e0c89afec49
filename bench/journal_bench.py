"""Journal appends at 1/16/64 concurrent writers and 100 B / 1 KiB / 16 KiB
entries, against the raw O_DIRECT+fdatasync limit of the same device."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from common.errors import JournalFull
from common.units import MiB
from journal import Journal, JournalSettings

from ._harness import Row, percentile
from ._load import open_loop, threaded_closed_loop
from .raw_device import raw_group_commit

WRITERS = (1, 16, 64)
SIZES = (100, 1024, 16384)


def _trimmer(journal: Journal, stop: threading.Event) -> None:
    """Stands in for checkpoints: trim to what is synced once half the ring is
    used.  Like the bookie's checkpoints, that is rare next to the syncs; a trim
    every few milliseconds would add its header write and fdatasync to the
    device's load and measure something no deployment does."""
    half = journal.capacity_bytes // 2
    while not stop.wait(0.01):
        if journal.appended_offset - journal.trim_offset > half:
            journal.trim(journal.synced_offset)


def journal_appends(device: Path, *, capacity: int, writers: int, size: int,
                    duration_s: float) -> Row:
    settings = JournalSettings(device_path=device, capacity_bytes=capacity)
    journal = Journal.open(settings)
    for _ in journal.replay():
        pass
    journal.start()
    stop = threading.Event()
    body = b"x" * size

    def append(_n: int, _turn: int) -> bool:
        try:
            journal.append_nowait(body).future.result()
        except JournalFull:
            journal.wait_for_space(size + 8192, 1.0)
            return False
        return True

    trim = threading.Thread(target=_trimmer, args=(journal, stop))
    trim.start()
    load = threaded_closed_loop(append, writers=writers, duration_s=duration_s)
    stop.set()
    trim.join()
    journal.close()
    return load.row("journal_append", {"writers": writers, "entry": size}, size)


def journal_paced(device: Path, *, capacity: int, size: int, rate_per_s: float,
                  duration_s: float) -> Row:
    """Open-loop appends at a fixed rate, latency counted from the scheduled
    time; its limit is the raw device's simplest group commit at the same rate
    (same pacing, same threads, no journal), measured past the ring."""
    journal = Journal.open(JournalSettings(device_path=device, capacity_bytes=capacity))
    for _ in journal.replay():
        pass
    journal.start()
    stop = threading.Event()
    trim = threading.Thread(target=_trimmer, args=(journal, stop))
    trim.start()
    body = b"x" * size
    latencies: list[float] = []
    lock = threading.Lock()

    def submit(scheduled: float) -> None:
        def done(_f: object) -> None:
            with lock:
                latencies.append(time.perf_counter() - scheduled)

        journal.append_nowait(body).future.add_done_callback(done)

    open_loop(submit, rate_per_s=rate_per_s, duration_s=duration_s)
    stop.set()  # the trimmer goes first: trimming a closed journal fails
    trim.join()
    journal.close()
    floor = raw_group_commit(
        device, size=size, rate_per_s=rate_per_s, duration_s=duration_s,
        region=(capacity + 8192, capacity + 8192 + 128 * MiB))
    floor_p99_ms = percentile(floor.latencies_s, 99) * 1e3
    return Row("journal_paced", {"entry": size, "rate": int(rate_per_s)},
               percentile(latencies, 99) * 1e3, "p99 ms", limit=floor_p99_ms,
               limit_name="raw group commit p99 at the same rate",
               extra={"p50_ms": percentile(latencies, 50) * 1e3, "acks": len(latencies),
                      "raw_p50_ms": percentile(floor.latencies_s, 50) * 1e3,
                      # The device alone: no ack can beat its slowest fdatasyncs.
                      "raw_commit_p99_ms": percentile(floor.commits_s, 99) * 1e3,
                      "raw_commit_max_ms": max(floor.commits_s) * 1e3, "target_ms": 2.0})


def run(device: Path, *, raw_limit_mb_s: float, duration_s: float) -> list[Row]:
    rows = []
    for size in SIZES:
        for writers in WRITERS:
            row = journal_appends(device, capacity=256 * MiB, writers=writers, size=size,
                                  duration_s=duration_s)
            row.limit, row.limit_name = raw_limit_mb_s, "raw 256KiB O_DIRECT+fdatasync"
            rows.append(row)
    saturation = rows[-1].extra["entries_per_s"]  # 16 KiB at 64 writers
    rows.append(journal_paced(device, capacity=256 * MiB, size=SIZES[-1],
                              rate_per_s=saturation / 2, duration_s=duration_s))
    return rows
