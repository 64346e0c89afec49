"""RingReader: every read returns the ring's bytes, whatever the mix of chunk
hits, records straddling two chunks, read-ahead and moves backwards."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from journal._recovery import BLOCK, RingReader

RING = os.urandom(64 * BLOCK)


class CountingRing:
    def __init__(self, *, fail_from: int | None = None) -> None:
        self.reads: list[tuple[int, int]] = []
        self.fail_from = fail_from

    def __call__(self, start: int, size: int) -> bytes:
        assert start % BLOCK == 0 and size % BLOCK == 0, "reads stay aligned"
        self.reads.append((start, size))
        if self.fail_from is not None and start >= self.fail_from:
            raise OSError(f"device read at {start} failed")
        # Past the end reads as zeros, as a ring past its written end would.
        return (RING[start:start + size]).ljust(size, b"\0")


reads = st.lists(st.tuples(st.integers(0, len(RING) - 1), st.integers(1, 3 * BLOCK)),
                 min_size=1, max_size=40)


@settings(max_examples=200, deadline=None)
@given(reads=reads, sequential=st.booleans())
def test_every_read_returns_the_ring_bytes(reads: list[tuple[int, int]],
                                           sequential: bool) -> None:
    if sequential:
        reads = sorted(reads)
    reader = RingReader(CountingRing(), chunk_bytes=2 * BLOCK)
    try:
        for offset, size in reads:
            expected = RING[offset:offset + size].ljust(size, b"\0")
            assert reader.get(offset, size) == expected
    finally:
        reader.close()


def test_a_sequential_scan_reads_each_chunk_once() -> None:
    ring = CountingRing()
    reader = RingReader(ring, chunk_bytes=4 * BLOCK)
    record = 3000  # records straddle chunk ends
    for offset in range(0, 32 * BLOCK - record, record):
        assert reader.get(offset, record) == RING[offset:offset + record]
    reader.close()
    starts = [start for start, _ in ring.reads]
    assert starts == sorted(set(starts)), "no chunk read twice"
    assert len(ring.reads) <= 32 // 4 + 1  # the last read-ahead may go unused


def test_a_failed_read_ahead_raises_only_when_its_bytes_are_needed() -> None:
    ring = CountingRing(fail_from=4 * BLOCK)
    reader = RingReader(ring, chunk_bytes=4 * BLOCK)
    assert reader.get(0, 100) == RING[:100]  # reads ahead [4, 8) blocks, which fails
    assert reader.get(100, 100) == RING[100:200]
    with pytest.raises(OSError, match="read at 16384 failed"):
        reader.get(4 * BLOCK, 100)
    reader.close()


def test_an_unused_failed_read_ahead_is_not_an_error() -> None:
    ring = CountingRing(fail_from=4 * BLOCK)
    reader = RingReader(ring, chunk_bytes=4 * BLOCK)
    assert reader.get(0, 100) == RING[:100]
    ring.fail_from = None
    assert reader.get(6 * BLOCK, 100) == RING[6 * BLOCK:6 * BLOCK + 100]
    reader.close()
