"""The double-buffered write cache (BookKeeper's DbLedgerStorage WriteCache pair).

Adds go to the *active* buffer; a checkpoint swaps it with the empty *standby*
buffer under the bookie's add lock, and the one flusher thread then owns the
frozen buffer until it has reached the entry log and the index.  Readers look
in the active buffer, then the frozen one, then the index: a frozen buffer is
emptied only after its index batch committed, so an entry is always in at least
one of the three places a reader looks.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

from common.errors import invariant

Key = tuple[int, int]


class WriteCacheBuffer:
    """One buffer: (ledger_id, entry_id) -> (payload, crc32c), with a byte count."""

    def __init__(self, capacity_bytes: int) -> None:
        self.capacity_bytes = capacity_bytes
        self.entries: dict[Key, tuple[bytes, int]] = {}
        self.size_bytes = 0

    def fits(self, nbytes: int) -> bool:
        # An entry larger than a whole buffer still fits into an empty one, so a
        # big entry is slow (it forces a flush) rather than impossible.
        return not self.entries or self.size_bytes + nbytes <= self.capacity_bytes

    def put(self, ledger_id: int, entry_id: int, payload: bytes, crc: int) -> None:
        # A replica's entry may be stored again (a resend, a higher epoch): the
        # buffer counts the bytes it holds, not the bytes it was given.
        old = self.entries.get((ledger_id, entry_id))
        if old is not None:
            self.size_bytes -= len(old[0])
        self.entries[(ledger_id, entry_id)] = (payload, crc)
        self.size_bytes += len(payload)

    def sorted_records(self, live: set[int]) -> list[tuple[int, int, bytes, int]]:
        """The entries of the ledgers in ``live`` as (ledger id, entry id, payload,
        crc32c), in (ledger, entry) order, so each ledger is contiguous in the log.

        Grouped by ledger in a Python loop rather than by one ``sorted()`` of
        every key: that call holds the GIL for milliseconds (tuple compares of
        interleaved ledgers), which every add waiting on the journal pays in
        latency, while the loop lets other threads in.  A ledger's entries are
        put in id order except for replicas stored out of order, so only their
        list is sorted (ids are unique: payloads are never compared)."""
        by_ledger: dict[int, list[tuple[int, int, bytes, int]]] = {}
        for (ledger_id, entry_id), (payload, crc) in self.entries.items():
            group = by_ledger.get(ledger_id)
            if group is None:
                group = by_ledger[ledger_id] = []
            group.append((ledger_id, entry_id, payload, crc))
        ordered: list[tuple[int, int, bytes, int]] = []
        for ledger_id in sorted(by_ledger.keys() & live):
            group = by_ledger[ledger_id]
            if any(group[i][1] > group[i + 1][1] for i in range(len(group) - 1)):
                group.sort()
            ordered.extend(group)
        return ordered

    def clear(self) -> None:
        self.entries = {}
        self.size_bytes = 0


@dataclass(frozen=True)
class WriteCacheStatistics:
    active_bytes: int
    active_entries: int
    frozen_bytes: int
    frozen_entries: int
    capacity_bytes: int


class WriteCache:
    """Two buffers of half the configured size each.

    ``put``/``swap`` must be called with the owner's add lock held; ``get`` is
    lock-free (dict reads are atomic under the GIL and buffers are replaced, not
    mutated, once frozen).
    """

    def __init__(self, size_bytes: int) -> None:
        half = size_bytes // 2
        self._active = WriteCacheBuffer(half)
        self._frozen = WriteCacheBuffer(half)
        self._frozen_busy = False
        self.space = threading.Condition()

    def fits(self, nbytes: int) -> bool:
        return self._active.fits(nbytes)

    def put(self, ledger_id: int, entry_id: int, payload: bytes, crc: int) -> None:
        self._active.put(ledger_id, entry_id, payload, crc)

    def try_stage(self, ledger_id: int, first: int, payloads: Sequence[bytes],
                  crcs: Sequence[int], nbytes: int) -> bool:
        """Put entries ``first…`` into the active buffer if ``nbytes`` fit; False
        (nothing put) otherwise.  One call per add: this is the hot path."""
        active = self._active
        if active.entries and active.size_bytes + nbytes > active.capacity_bytes:
            return False
        entries = active.entries
        if len(payloads) == 1:  # a single add, the commonest: no loop to set up
            entries[(ledger_id, first)] = (payloads[0], crcs[0])
        else:
            for i, payload in enumerate(payloads):
                entries[(ledger_id, first + i)] = (payload, crcs[i])
        active.size_bytes += nbytes
        return True

    def discard(self, ledger_id: int, first: int, count: int, nbytes: int) -> None:
        """Take back entries just staged (their journal append was refused)."""
        active = self._active
        for i in range(count):
            del active.entries[(ledger_id, first + i)]
        active.size_bytes -= nbytes

    def wait_for_room(self, nbytes: int, timeout_s: float) -> bool:
        """Wait until ``nbytes`` fit the active buffer (a swap made room)."""
        with self.space:
            return self.space.wait_for(lambda: self.fits(nbytes), timeout_s)

    def is_full(self) -> bool:
        return self._active.size_bytes >= self._active.capacity_bytes

    def is_half_full(self) -> bool:
        return 2 * self._active.size_bytes >= self._active.capacity_bytes

    @property
    def active_bytes(self) -> int:
        return self._active.size_bytes

    def get(self, ledger_id: int, entry_id: int) -> tuple[bytes, int] | None:
        key = (ledger_id, entry_id)
        active, frozen = self._active, self._frozen
        hit = active.entries.get(key)
        if hit is None:
            hit = frozen.entries.get(key)
        return hit

    def ids_between(self, ledger_id: int, first: int, last: int) -> set[int]:
        """Entry ids of ``ledger_id`` in ``first … last`` held in either buffer (a
        scan of both: for replica listings, not the add path)."""
        found: set[int] = set()
        for buffer in (self._active, self._frozen):
            found.update(e for (lid, e) in list(buffer.entries)
                         if lid == ledger_id and first <= e <= last)
        return found

    def can_swap(self) -> bool:
        return not self._frozen_busy

    def swap(self) -> WriteCacheBuffer:
        """Freeze the active buffer and make the (empty) standby active."""
        invariant(not self._frozen_busy, "swap while the frozen buffer is still being flushed")
        fresh = WriteCacheBuffer(self._active.capacity_bytes)
        self._frozen, self._active = self._active, fresh
        self._frozen_busy = True
        with self.space:
            self.space.notify_all()
        return self._frozen

    def release_frozen(self) -> None:
        """The frozen buffer reached the index: drop it and wake waiting adds."""
        with self.space:
            self._frozen = WriteCacheBuffer(self._active.capacity_bytes)
            self._frozen_busy = False
            self.space.notify_all()

    def statistics(self) -> WriteCacheStatistics:
        a, f = self._active, self._frozen
        return WriteCacheStatistics(a.size_bytes, len(a.entries), f.size_bytes,
                                    len(f.entries), a.capacity_bytes * 2)
