"""Which entry logs GC removes and which it compacts: pure functions of usage.

Usage of a log is the bytes its ledgers map attributes to ledgers whose local
entries are still needed, over the log's size.  The map counts every record
ever written for a ledger (including copies compaction made before a crash
that never reached the index), so usage is an upper bound: a log may be
compacted later than ideal, never removed while it holds a live entry.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping
from dataclasses import dataclass

from entrylog import LedgerUsage


@dataclass(frozen=True)
class LogUsage:
    log_id: int
    size_bytes: int
    live_bytes: int
    ledger_ids: tuple[int, ...]

    @property
    def usage(self) -> float:
        return min(1.0, self.live_bytes / self.size_bytes) if self.size_bytes else 0.0


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
    return LogUsage(log_id, size_bytes, live_bytes, tuple(sorted(usage_map)))


def removable(logs: Iterable[LogUsage]) -> list[LogUsage]:
    """Logs with no live data at all: removed without copying anything."""
    return [u for u in logs if u.live_bytes == 0]


def compaction_candidates(logs: Iterable[LogUsage], threshold: float) -> list[LogUsage]:
    """Logs with some live data under ``threshold``, lowest usage first (most
    space reclaimed per byte copied)."""
    chosen = [u for u in logs if u.live_bytes > 0 and u.usage < threshold]
    return sorted(chosen, key=lambda u: (u.usage, u.log_id))
