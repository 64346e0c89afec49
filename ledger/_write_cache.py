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
from typing import NamedTuple

from common.errors import invariant


class CachedRun(NamedTuple):
    """Consecutive entries of one ledger from a frozen buffer, as a checkpoint
    hands them to the entry log: ids ``first_entry_id, …``, payloads and CRC32C."""

    ledger_id: int
    first_entry_id: int
    payloads: list[bytes]
    crcs: list[int]


class _LedgerEntries:
    """One ledger's entries in a buffer.  Adds come in id order, so they are two
    columns from ``first``: an add appends to them, a read indexes them, and a
    checkpoint hands them over as they are.  An entry stored anywhere but next
    (a replica's resend, a gap, a higher epoch's copy) turns the ledger into a
    dict by id, whose (payload, crc) pairs are replaced whole.

    Reads take no lock, so every change keeps what a reader may see at any
    bytecode consistent: a CRC is appended before its payload (a reader bounded
    by ``len(payloads)`` always finds it), the columns are never changed in
    place, and they stay as they were when the dict takes over.  Only a refused
    add's entries are taken back off the end, and no reader asks for those: its
    ids were never below the LAC."""

    __slots__ = ("by_id", "crcs", "first", "payloads")

    def __init__(self, first: int) -> None:
        self.first = first
        self.payloads: list[bytes] = []
        self.crcs: list[int] = []
        self.by_id: dict[int, tuple[bytes, int]] | None = None

    def get(self, entry_id: int) -> tuple[bytes, int] | None:
        by_id = self.by_id
        if by_id is not None:
            return by_id.get(entry_id)
        i = entry_id - self.first
        if 0 <= i < len(self.payloads):
            return self.payloads[i], self.crcs[i]
        return None

    def extend(self, payloads: Sequence[bytes], crcs: Sequence[int]) -> None:
        """Append the next entries (their ids follow the last one's)."""
        self.crcs.extend(crcs)
        self.payloads.extend(payloads)

    def is_next(self, entry_id: int) -> bool:
        return self.by_id is None and entry_id == self.first + len(self.payloads)

    def set(self, entry_id: int, payload: bytes, crc: int) -> None:
        if self.is_next(entry_id):
            self.extend((payload,), (crc,))
            return
        if self.by_id is None:
            self.by_id = dict(zip(range(self.first, self.first + len(self.payloads)),
                                  zip(self.payloads, self.crcs, strict=True), strict=True))
        self.by_id[entry_id] = (payload, crc)

    def remove_last(self, first: int, count: int) -> None:
        """Take back entries ``first … first + count - 1``, the last ones set."""
        if self.by_id is None:
            invariant(first + count == self.first + len(self.payloads),
                      "only the entries staged last are taken back")
            del self.payloads[first - self.first:]
            del self.crcs[first - self.first:]
        else:
            for entry_id in range(first, first + count):
                del self.by_id[entry_id]

    def __len__(self) -> int:
        return len(self.payloads) if self.by_id is None else len(self.by_id)

    def ids(self) -> list[int]:
        if self.by_id is None:
            return list(range(self.first, self.first + len(self.payloads)))
        return list(self.by_id)

    def runs(self, ledger_id: int) -> list[CachedRun]:
        """The entries as runs of consecutive ids, in id order."""
        if self.by_id is None:
            return [CachedRun(ledger_id, self.first, self.payloads, self.crcs)] \
                if self.payloads else []
        runs: list[CachedRun] = []
        for entry_id in sorted(self.by_id):
            payload, crc = self.by_id[entry_id]
            if runs and runs[-1].first_entry_id + len(runs[-1].payloads) == entry_id:
                runs[-1].payloads.append(payload)
                runs[-1].crcs.append(crc)
            else:
                runs.append(CachedRun(ledger_id, entry_id, [payload], [crc]))
        return runs


class WriteCacheBuffer:
    """One buffer: each ledger's entries (payload, crc32c), with byte and entry counts."""

    def __init__(self, capacity_bytes: int) -> None:
        self.capacity_bytes = capacity_bytes
        self.ledgers: dict[int, _LedgerEntries] = {}
        self.size_bytes = 0
        self.entry_count = 0

    def fits(self, nbytes: int) -> bool:
        # An entry larger than a whole buffer still fits into an empty one, so a
        # big entry is slow (it forces a flush) rather than impossible.
        return not self.entry_count or self.size_bytes + nbytes <= self.capacity_bytes

    def get(self, ledger_id: int, entry_id: int) -> tuple[bytes, int] | None:
        entries = self.ledgers.get(ledger_id)
        return None if entries is None else entries.get(entry_id)

    def put(self, ledger_id: int, entry_id: int, payload: bytes, crc: int) -> None:
        # A replica's entry may be stored again (a resend, a higher epoch): the
        # buffer counts the bytes it holds, not the bytes it was given.
        entries = self.ledgers.get(ledger_id)
        if entries is None:
            entries = self.ledgers[ledger_id] = _LedgerEntries(entry_id)
        old = entries.get(entry_id)
        if old is None:
            self.entry_count += 1
        else:
            self.size_bytes -= len(old[0])
        entries.set(entry_id, payload, crc)
        self.size_bytes += len(payload)

    def sorted_runs(self, live: set[int]) -> list[CachedRun]:
        """The entries of the ledgers in ``live`` in (ledger, entry) order, as
        runs of consecutive ids, so each ledger is contiguous in the log.  Only
        ledger ids are sorted: a ledger's entries are in order already."""
        runs: list[CachedRun] = []
        for ledger_id in sorted(self.ledgers.keys() & live):
            runs.extend(self.ledgers[ledger_id].runs(ledger_id))
        return runs


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
        if active.entry_count and active.size_bytes + nbytes > active.capacity_bytes:
            return False
        entries = active.ledgers.get(ledger_id)
        if entries is None:
            entries = active.ledgers[ledger_id] = _LedgerEntries(first)
        if entries.by_id is None and first == entries.first + len(entries.payloads):
            # The next ids of the ledger, as every add's are: ``extend``, inlined
            # (this runs for every add).
            entries.crcs.extend(crcs)
            entries.payloads.extend(payloads)
            active.entry_count += len(payloads)
            active.size_bytes += nbytes
        else:
            for i, payload in enumerate(payloads):
                active.put(ledger_id, first + i, payload, crcs[i])
        return True

    def discard(self, ledger_id: int, first: int, count: int, nbytes: int) -> None:
        """Take back entries just staged (their journal append was refused)."""
        active = self._active
        entries = active.ledgers[ledger_id]
        entries.remove_last(first, count)
        if not len(entries):
            del active.ledgers[ledger_id]
        active.entry_count -= count
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
        active, frozen = self._active, self._frozen
        hit = active.get(ledger_id, entry_id)
        if hit is None:
            hit = frozen.get(ledger_id, entry_id)
        return hit

    def ids_between(self, ledger_id: int, first: int, last: int) -> set[int]:
        """Entry ids of ``ledger_id`` in ``first … last`` held in either buffer (for
        replica listings, not the add path)."""
        found: set[int] = set()
        for buffer in (self._active, self._frozen):
            entries = buffer.ledgers.get(ledger_id)
            if entries is not None:
                found.update(e for e in entries.ids() if first <= e <= last)
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
        return WriteCacheStatistics(a.size_bytes, a.entry_count, f.size_bytes,
                                    f.entry_count, a.capacity_bytes * 2)
