"""Cached blocks of segment objects and the read-ahead window (no I/O, no locks).

Segments are read in aligned 1 MiB blocks.  Each segment object has a window
(in blocks) that works like a TCP congestion window (seed 001): it starts at
the minimum, doubles when reads keep consuming what was fetched ahead, and
halves whenever a block fetched ahead leaves the cache unread (evicted to make
room, or older than the TTL), which is what random readers cause.

The caller (``RemoteLedgerReader``) holds its lock around every call and does
the GETs itself; this class only decides and remembers.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from dataclasses import dataclass
from typing import NamedTuple

BLOCK_SIZE_BYTES = 1024 * 1024
# Windows of segments no longer read are forgotten beyond this many.
_WINDOW_COUNT_MAX = 4096


@dataclass
class _Block:
    data: bytes
    # Fetched ahead of any read and not read since.
    prefetched: bool
    stored_at: float


@dataclass
class _Window:
    blocks: int
    # Block after the last one fetched or being fetched for this segment.
    fetched_end: int = -1
    # Blocks of the segment, as of the last GET planned (-1: none yet).
    segment_blocks: int = -1


class Fetch(NamedTuple):
    """The blocks of one ranged GET."""

    first_block: int
    block_count: int


class ReadAheadCache:
    def __init__(self, *, capacity_bytes: int, window_blocks_min: int, window_blocks_max: int,
                 ttl_s: float) -> None:
        self._capacity_bytes = capacity_bytes
        self._min, self._max = window_blocks_min, window_blocks_max
        self._ttl_s = ttl_s
        self._blocks: OrderedDict[tuple[str, int], _Block] = OrderedDict()
        self._windows: dict[str, _Window] = {}
        self._size_bytes = 0
        self.counts: Counter[str] = Counter()

    def lookup(self, key: str, block: int) -> tuple[bytes | None, bool]:
        """``(data, was_prefetched)``; ``(None, False)`` on a miss."""
        found = self._blocks.get((key, block))
        if found is None:
            self.counts["cache_misses"] += 1
            return None, False
        self._blocks.move_to_end((key, block))
        self.counts["cache_hits"] += 1
        was_prefetched, found.prefetched = found.prefetched, False
        if was_prefetched:
            self.counts["read_ahead_hits"] += 1
        return found.data, was_prefetched

    def plan_miss(self, key: str, block: int, segment_blocks: int) -> Fetch:
        """The GET to issue for a read that missed ``block``."""
        window = self._window(key)
        if block == window.fetched_end:
            # The reader ran off the end of what was fetched: sequential.
            self._grow(window)
        count = max(1, min(window.blocks, segment_blocks - block))
        window.fetched_end = block + count
        window.segment_blocks = segment_blocks
        return Fetch(block, count)

    def plan_ahead(self, key: str, block: int, segment_blocks: int) -> Fetch | None:
        """After a read of a prefetched ``block``: the next GET to start, if it is time."""
        window = self._window(key)
        ahead = window.fetched_end - block - 1
        # Keep up to two windows ahead of the reader, so GETs run back to back: a
        # reader that decodes faster than the network delivers would otherwise
        # leave the connection idle between windows.
        if ahead >= 2 * window.blocks or window.fetched_end >= segment_blocks:
            return None
        self._grow(window)
        start = window.fetched_end
        count = min(window.blocks, segment_blocks - start)
        window.fetched_end = start + count
        window.segment_blocks = segment_blocks
        return Fetch(start, count)

    def carry_over(self, previous_key: str, key: str) -> None:
        """A reader moves on from ``previous_key`` to ``key`` (the next pack of
        ledgers read in order): if it had fetched ``previous_key`` to its end
        and ``key`` has no window yet, ``key`` starts with the window it had,
        rather than climbing from the minimum again in every pack."""
        previous, window = self._windows.get(previous_key), self._windows.get(key)
        if (previous is not None and window is None and previous.segment_blocks > 0
                and previous.fetched_end >= previous.segment_blocks):
            self._window(key).blocks = previous.blocks
            self.counts["read_ahead_carried"] += 1

    def cancel(self, key: str, fetch: Fetch) -> None:
        """A planned GET failed: the window no longer covers its blocks."""
        window = self._window(key)
        window.fetched_end = min(window.fetched_end, fetch.first_block)

    def insert(self, key: str, fetch: Fetch, blocks: list[bytes], *, wanted: int | None,
               now: float) -> None:
        """Store a GET's blocks; all but ``wanted`` count as prefetched."""
        for offset, data in enumerate(blocks):
            number = fetch.first_block + offset
            old = self._blocks.pop((key, number), None)
            if old is not None:
                self._size_bytes -= len(old.data)
            self._blocks[(key, number)] = _Block(data, number != wanted, now)
            self._size_bytes += len(data)
        self.counts["bytes_fetched"] += sum(len(b) for b in blocks)
        self._expire(now)
        while self._size_bytes > self._capacity_bytes and self._blocks:
            (old_key, _), evicted = self._blocks.popitem(last=False)
            self._size_bytes -= len(evicted.data)
            if evicted.prefetched:
                self._wasted(old_key)

    def drop(self, key: str, blocks: range | None = None) -> None:
        """Forget cached blocks of ``key`` (all of them when ``blocks`` is None)."""
        doomed = [k for k in self._blocks if k[0] == key and (blocks is None or k[1] in blocks)]
        for k in doomed:
            self._size_bytes -= len(self._blocks.pop(k).data)
        if blocks is None:
            self._windows.pop(key, None)

    def window_bytes(self, key: str) -> int:
        return self._window(key).blocks * BLOCK_SIZE_BYTES

    @property
    def size_bytes(self) -> int:
        return self._size_bytes

    def _expire(self, now: float) -> None:
        expired = [k for k, b in self._blocks.items()
                   if b.prefetched and now - b.stored_at > self._ttl_s]
        for k in expired:
            self._size_bytes -= len(self._blocks.pop(k).data)
            self._wasted(k[0])

    def _wasted(self, key: str) -> None:
        self.counts["read_ahead_wasted"] += 1
        window = self._window(key)
        if window.blocks > self._min:
            window.blocks = max(self._min, window.blocks // 2)
            self.counts["read_ahead_shrinks"] += 1

    def _grow(self, window: _Window) -> None:
        if window.blocks < self._max:
            window.blocks = min(self._max, window.blocks * 2)
            self.counts["read_ahead_grows"] += 1

    def _window(self, key: str) -> _Window:
        window = self._windows.get(key)
        if window is None:
            if len(self._windows) >= _WINDOW_COUNT_MAX:
                self._windows.pop(next(iter(self._windows)))
            window = self._windows[key] = _Window(self._min)
        return window
