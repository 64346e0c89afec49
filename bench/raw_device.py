"""The limit: O_DIRECT + fdatasync sequential writes on the journal's device."""

from __future__ import annotations

import mmap
import os
import time
from pathlib import Path

from ._harness import Row

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


def raw_sync_latencies_s(device: Path, block_size: int, count: int,
                         region: tuple[int, int]) -> list[float]:
    """Seconds taken by each of ``count`` back-to-back pwrite+fdatasync of
    ``block_size`` bytes inside ``region`` (start, end) of the device: the
    floor under any latency the journal can promise on it."""
    fd = os.open(device, os.O_RDWR | getattr(os, "O_DIRECT", 0))
    buf = mmap.mmap(-1, block_size)
    latencies = []
    offset = region[0]
    try:
        for _ in range(count):
            started = time.perf_counter()
            os.pwrite(fd, buf, offset)
            os.fdatasync(fd)
            latencies.append(time.perf_counter() - started)
            offset = offset + block_size if offset + 2 * block_size <= region[1] else region[0]
    finally:
        os.close(fd)
        buf.close()
    return latencies


def run(device: Path, *, total_bytes: int, region_bytes: int) -> list[Row]:
    rows = []
    for bs in BLOCK_SIZES:
        mbps, iops = raw_write_mb_s(device, bs, total_bytes, region_bytes)
        rows.append(Row("raw_odirect_fdatasync", {"block": bs}, mbps, "MB/s",
                        extra={"writes_per_s": iops}))
    _zero(device, region_bytes)
    return rows


def _zero(device: Path, size: int) -> None:
    """Leave the device blank, so the journal formats it instead of (rightly)
    refusing bytes it does not recognise."""
    fd = os.open(device, os.O_RDWR | getattr(os, "O_DIRECT", 0))
    buf = mmap.mmap(-1, 1 << 20)
    try:
        for offset in range(0, size, len(buf)):
            os.pwrite(fd, buf, offset)
        os.fdatasync(fd)
    finally:
        os.close(fd)
        buf.close()


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
