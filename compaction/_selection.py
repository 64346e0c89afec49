"""Which entry logs GC removes and which it compacts: pure functions of usage.

Usage of a log is the bytes its ledgers map attributes to ledgers whose local
entries are still needed, over the log's size.  The map counts every record
ever written for a ledger (including copies compaction made before a crash
that never reached the index), so usage is an upper bound: a log may be
compacted later than ideal, never removed while it holds a live entry.
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Collection, Container, Iterable, Mapping
from dataclasses import dataclass

from entrylog import LedgerUsage


@dataclass(frozen=True)
class LogUsage:
    log_id: int
    size_bytes: int
    live_bytes: int
    # The log's ledger ids, sorted, eight bytes each: GC keeps this for every
    # sealed log between runs, so a tuple of ints (and a set beside it) cost a
    # node holding a million ledgers tens of megabytes.
    ledger_ids: array[int]

    @property
    def usage(self) -> float:
        return min(1.0, self.live_bytes / self.size_bytes) if self.size_bytes else 0.0

    def holds_any(self, ids: Collection[int]) -> bool:
        """Whether one of ``ids`` is among the log's ledgers: a binary search
        each, or one pass over the log's ids when ``ids`` are many."""
        held = self.ledger_ids
        if len(ids) * max(1, len(held).bit_length()) > len(held):
            wanted = ids if isinstance(ids, set | frozenset) else set(ids)
            return not wanted.isdisjoint(held)
        for lid in ids:
            at = bisect.bisect_left(held, lid)
            if at < len(held) and held[at] == lid:
                return True
        return False


def log_usage(log_id: int, size_bytes: int, usage_map: Mapping[int, LedgerUsage],
              live: Container[int], located: Mapping[int, int] | None = None) -> LogUsage:
    """``located``: for ledgers whose older entries were dropped once tiered,
    how many of their entries the index still points into this log; such a
    ledger counts its map's bytes in that proportion (zero when none is left,
    so a log holding only dropped entries is removable)."""
    located = located or {}
    live_bytes = 0
    for lid, u in usage_map.items():
        if lid not in live:
            continue
        if lid in located:
            live_bytes += u.byte_count * min(u.entry_count, located[lid]) // max(1, u.entry_count)
        else:
            live_bytes += u.byte_count
    return LogUsage(log_id, size_bytes, live_bytes, array("Q", sorted(usage_map)))


def removable(logs: Iterable[LogUsage]) -> list[LogUsage]:
    """Logs with no live data at all: removed without copying anything."""
    return [u for u in logs if u.live_bytes == 0]


def compaction_candidates(logs: Iterable[LogUsage], threshold: float) -> list[LogUsage]:
    """Logs with some live data under ``threshold``, lowest usage first (most
    space reclaimed per byte copied)."""
    chosen = [u for u in logs if u.live_bytes > 0 and u.usage < threshold]
    return sorted(chosen, key=lambda u: (u.usage, u.log_id))
