"""What the bookie reports about itself (``/metrics``, ``/bookie/info``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from journal import Journal

from ._checkpoint import CheckpointResult
from ._storage import EntryStorage


@dataclass(frozen=True)
class BookieStatistics:
    ledger_count: int
    adds_total: int
    add_bytes_total: int
    reads_total: int
    checkpoints_total: int
    last_checkpoint_duration_s: float
    last_checkpoint_entries: int
    write_cache_active_bytes: int
    write_cache_frozen_bytes: int
    write_cache_capacity_bytes: int
    read_cache_bytes: int
    read_cache_hits: int
    read_cache_misses: int
    journal_appended_offset: int
    journal_synced_offset: int
    journal_trim_offset: int
    journal_used_bytes: int
    journal_capacity_bytes: int
    read_only: bool
    replica_count: int = 0

    def as_dict(self) -> dict[str, int | float]:
        return {k: (int(v) if isinstance(v, bool) else v) for k, v in asdict(self).items()}


def gather_statistics(storage: EntryStorage, journal: Journal, last: CheckpointResult | None,
                      *, ledger_count: int, read_only: bool, adds: int, add_bytes: int,
                      reads: int, checkpoints: int, replica_count: int = 0,
                      ) -> BookieStatistics:
    """A frozen snapshot of every counter (STYLE 11)."""
    wc = storage.write_cache.statistics()
    rc = storage.read_cache.statistics()
    js = journal.statistics()
    return BookieStatistics(
        ledger_count=ledger_count, adds_total=adds, add_bytes_total=add_bytes,
        reads_total=reads, checkpoints_total=checkpoints,
        last_checkpoint_duration_s=last.duration_s if last else 0.0,
        last_checkpoint_entries=last.entry_count if last else 0,
        write_cache_active_bytes=wc.active_bytes, write_cache_frozen_bytes=wc.frozen_bytes,
        write_cache_capacity_bytes=wc.capacity_bytes, read_cache_bytes=rc.size_bytes,
        read_cache_hits=rc.hits, read_cache_misses=rc.misses,
        journal_appended_offset=js.appended_offset, journal_synced_offset=js.synced_offset,
        journal_trim_offset=js.trim_offset, journal_used_bytes=js.used_bytes,
        journal_capacity_bytes=js.capacity_bytes, read_only=read_only,
        replica_count=replica_count,
    )
