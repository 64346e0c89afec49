"""The limit: O_DIRECT + fdatasync sequential writes on the journal's device."""

from __future__ import annotations

import mmap
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from ._harness import Row, zero_fill
from ._load import open_loop

BLOCK_SIZES = (4096, 65536, 262144, 1048576)


def raw_write_mb_s(device: Path, block_size: int, total_bytes: int,
                   region_bytes: int, time_s_max: float = 5.0) -> tuple[float, float]:
    """(MB/s, writes/s) of back-to-back pwrite+fdatasync of ``block_size`` bytes:
    ``total_bytes`` of them, or as many as fit in ``time_s_max`` on a slow disk."""
    flags = os.O_RDWR | getattr(os, "O_DIRECT", 0)
    fd = os.open(device, flags)
    buf = mmap.mmap(-1, block_size)
    buf.write(os.urandom(block_size))
    try:
        count, offset = 0, 0
        started = time.perf_counter()
        deadline = started + time_s_max
        while count * block_size < total_bytes and time.perf_counter() < deadline:
            os.pwrite(fd, buf, offset)
            os.fdatasync(fd)
            offset = (offset + block_size) % region_bytes
            count += 1
        elapsed = time.perf_counter() - started
    finally:
        os.close(fd)
        buf.close()
    return count * block_size / elapsed / 1e6, count / elapsed


@dataclass
class RawGroupCommit:
    latencies_s: list[float]  # each arrival's, from its scheduled time to its ack
    commits_s: list[float]  # each pwrite + fdatasync, alone: what the device takes


def raw_group_commit(device: Path, *, size: int, rate_per_s: float, duration_s: float,
                     region: tuple[int, int]) -> RawGroupCommit:
    """The floor under the journal's paced latency: the simplest group commit on
    the raw device.  Arrivals at ``rate_per_s`` (``size`` bytes each, open loop)
    are queued; one thread writes all queued bytes in one O_DIRECT pwrite inside
    ``region``, fdatasyncs, acks them, repeats.  Latency of each arrival from its
    scheduled time: the same pacing, threads and device as the journal's row,
    with no journal code at all."""
    fd = os.open(device, os.O_RDWR | getattr(os, "O_DIRECT", 0))
    buf = mmap.mmap(-1, 4 << 20)
    arrived: list[float] = []
    result = RawGroupCommit([], [])
    cv = threading.Condition()
    done = False

    def committer() -> None:
        offset = region[0]
        while True:
            with cv:
                cv.wait_for(lambda: arrived or done)
                if not arrived:
                    return
                batch = arrived[:]
                arrived.clear()
            n = max(4096, min(len(batch) * size, len(buf)) // 4096 * 4096)
            offset = offset if offset + n <= region[1] else region[0]
            started = time.perf_counter()
            os.pwrite(fd, memoryview(buf)[:n], offset)
            os.fdatasync(fd)
            offset += n
            now = time.perf_counter()
            result.commits_s.append(now - started)
            result.latencies_s.extend(now - t for t in batch)

    def submit(scheduled: float) -> None:
        with cv:
            arrived.append(scheduled)
            cv.notify()

    thread = threading.Thread(target=committer)
    thread.start()
    try:
        open_loop(submit, rate_per_s=rate_per_s, duration_s=duration_s)
    finally:
        with cv:
            done = True
            cv.notify()
        thread.join()
        os.close(fd)
        buf.close()
    return result


def run(device: Path, *, total_bytes: int, region_bytes: int) -> list[Row]:
    rows = []
    for bs in BLOCK_SIZES:
        mbps, iops = raw_write_mb_s(device, bs, total_bytes, region_bytes)
        rows.append(Row("raw_odirect_fdatasync", {"block": bs}, mbps, "MB/s",
                        extra={"writes_per_s": iops}))
    zero_fill(device, region_bytes)  # the journal formats a blank device, refuses others
    return rows


def raw_read_mb_s(path: Path, total_bytes: int, block_size: int = 1 << 20) -> float:
    """Sequential O_DIRECT read of ``total_bytes`` from the start of a device or
    file: the limit for journal replay and entry-log scans."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECT", 0))
    buf = mmap.mmap(-1, block_size)
    total = 0
    started = time.perf_counter()
    try:
        while True:
            n = os.readv(fd, [buf])
            total += n
            if n < block_size or total >= total_bytes:
                break
    finally:
        os.close(fd)
        buf.close()
    return total / (time.perf_counter() - started) / 1e6


# How each journal sync mode makes one write durable, on the raw device: the
# journal's per-mode floor.  Buffered writes go through the page cache, then
# fdatasync (Redis's appendfsync always); the others bypass it with O_DIRECT.
SYNC_MODES = ("direct_fdatasync", "direct_dsync", "buffered_fdatasync")


def raw_durable_writes(device: Path, mode: str, *, block_size: int, count: int,
                       region: tuple[int, int]) -> list[float]:
    """Latency of each of ``count`` back-to-back durable ``block_size`` writes made
    the way sync mode ``mode`` makes them, sequential inside ``region``."""
    flags = os.O_RDWR if mode == "buffered_fdatasync" else os.O_RDWR | os.O_DIRECT
    fd = os.open(device, flags)
    buf = mmap.mmap(-1, block_size)
    buf.write(os.urandom(block_size))
    latencies: list[float] = []
    try:
        offset = region[0]
        for _ in range(count):
            started = time.perf_counter()
            if mode == "direct_dsync":
                os.pwritev(fd, [buf], offset, os.RWF_DSYNC)
            else:
                os.pwrite(fd, buf, offset)
                os.fdatasync(fd)
            latencies.append(time.perf_counter() - started)
            offset = offset + block_size if offset + 2 * block_size <= region[1] else region[0]
    finally:
        os.close(fd)
        buf.close()
    return latencies
