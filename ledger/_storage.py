"""Entry storage below the journal: write cache → entry log → RocksDB index,
and the read path back through the caches (BookKeeper's DbLedgerStorage).

This layer knows entries, not ledger semantics: the bookie decides what is
readable (LAC) and when to checkpoint; this layer moves bytes.  A read verifies
a payload's CRC32C once, where its bytes come from disk (the entry log checks
every record it returns); cached entries were checked on their way in.
"""

from __future__ import annotations

import bisect
import itertools
import logging
import time
from collections.abc import Iterable, Iterator, Mapping

from common.errors import CorruptRecord
from entrylog import EntryLogStore, Location

from ._index import IndexBatch, LocationIndex
from ._ledger_record import LedgerRecord
from ._read_cache import ReadCache
from ._replica_table import ReplicaRecord
from ._settings import ReadCacheSettings
from ._write_cache import WriteCache, WriteCacheBuffer

log = logging.getLogger(__name__)

# A bulk scan reads the ledger's following records this many bytes (or
# entries) at a time: one pread per window instead of one per entry.
_SCAN_BYTES = 4 * 1024 * 1024
_SCAN_COUNT = 4096

# A paced checkpoint writes this many entries (a few hundred microseconds of
# Python; docs/architecture.md gives the cost an entry), then sleeps this long:
# long enough for a waiting thread to take the GIL, short enough that a second
# of adds flushes in well under a second.
_PACED_SLICE_ENTRIES = 256
_PACED_PAUSE_S = 0.0001


class EntryStorage:
    def __init__(self, *, index: LocationIndex, entry_log: EntryLogStore, write_cache: WriteCache,
                 read_cache_settings: ReadCacheSettings, sync_every_bytes: int) -> None:
        self.index = index
        self.entry_log = entry_log
        self.write_cache = write_cache
        self._sync_every_bytes = sync_every_bytes
        self._read_settings = read_cache_settings
        self.read_cache = ReadCache(read_cache_settings.size_bytes)

    # --- read path -------------------------------------------------------

    def get(self, ledger_id: int, entry_id: int, *, cached: bool = True) -> tuple[bytes, int]:
        """(payload, crc32c) of a stored entry; NoSuchEntry when it is nowhere.

        ``cached=False`` (replicas, whose entries a higher epoch may replace) skips
        the read cache and read-ahead: a cached copy could outlive its replacement."""
        hit = self.write_cache.get(ledger_id, entry_id)
        if hit is None and cached:
            hit = self.read_cache.get(ledger_id, entry_id)
        if hit is not None:
            return hit
        # The index is consulted after both caches: a frozen buffer is dropped
        # only after its locations committed, so a miss above means a hit here.
        location, found = self._read_located(ledger_id, entry_id)
        if cached:
            self._read_ahead(location, ledger_id)
        return found

    def _read_ahead(self, location: Location, ledger_id: int) -> None:
        settings = self._read_settings
        if settings.size_bytes == 0:
            return
        try:
            following = self.entry_log.read_following(
                location, ledger_id, bytes_max=settings.readahead_bytes_max,
                count_max=settings.readahead_entry_count_max)
        except CorruptRecord as exc:
            # Read-ahead is only a guess (compaction may just have removed the
            # log); the entries it skips are read, and checked, when asked for.
            log.debug("read-ahead skipped: %s", exc)
            return
        for entry_id, payload, crc, _loc in following:
            self.read_cache.put(ledger_id, entry_id, payload, crc)

    def scan(self, ledger_id: int, first: int, last: int) -> Iterator[tuple[int, bytes, int]]:
        """``(entry_id, payload, crc32c)`` of entries ``first..last`` in order, for
        bulk readers (offload): the read cache is neither consulted nor filled,
        so a scan of a cold ledger does not evict hot entries, and each pread
        fetches up to ``_SCAN_BYTES`` of the ledger's following records at once.
        NoSuchEntry when an entry is nowhere (its local copy dropped)."""
        ahead: dict[int, tuple[bytes, int]] = {}
        for entry_id in range(first, last + 1):
            hit = ahead.pop(entry_id, None) or self.write_cache.get(ledger_id, entry_id)
            if hit is None:
                location, hit = self._read_located(ledger_id, entry_id)
                # Records after it in the same log are the ledger's next entries
                # whenever one flush wrote them (sorted by ledger and entry).
                following = self.entry_log.read_following(
                    location, ledger_id, bytes_max=_SCAN_BYTES, count_max=_SCAN_COUNT)
                ahead = {f.entry_id: (f.payload, f.crc32c) for f in following
                         if entry_id < f.entry_id <= last}
            yield entry_id, hit[0], hit[1]

    def _read_located(self, ledger_id: int, entry_id: int) -> tuple[Location, tuple[bytes, int]]:
        location = self.index.location(ledger_id, entry_id)
        try:
            return location, self.entry_log.read(location, ledger_id, entry_id)
        except CorruptRecord:
            # Compaction may have moved the entry and removed its old log
            # between the index lookup and the read; then the index says so.
            moved = self.index.location(ledger_id, entry_id)
            if moved == location:
                raise
            return moved, self.entry_log.read(moved, ledger_id, entry_id)

    # --- checkpoint steps (the checkpointer runs them in order) -------------

    def write_entries(self, frozen: WriteCacheBuffer, *, live: set[int],
                      pace: bool = True) -> IndexBatch:
        """Append a frozen buffer, sorted by (ledger, entry), to the entry log and
        collect its locations; entries of ledgers not in ``live`` (deleted) are
        dropped.  Nothing is durable yet.

        ``pace``: hand the GIL over between slices of entries.  This loop is the
        one long run of Python in a checkpoint, and a thread that never waits
        keeps the GIL for whole switch intervals (5 ms) while the journal's
        threads, each needing it briefly for every group commit, queue behind
        it: adds overlapping a checkpoint saw several times the usual p99
        (docs/benchmarks.md).  A checkpoint is background work that may take
        longer, until adds fill half the active write cache: then it is what
        they will wait for, and runs flat out.  A paced checkpoint also syncs
        the entry log every ``sync_every_bytes`` (WriteCacheSettings), so that
        the journal's syncs on a shared disk never queue behind the writeback
        of the whole buffer.  Replay, with nothing waiting, does neither."""
        batch = self.index.batch()
        entries_left = _PACED_SLICE_ENTRIES  # before the next pause
        for run in frozen.sorted_runs(live):
            start, count = 0, len(run.payloads)
            while start < count:
                end = self._piece_end(run.payloads, start, entries_left) if pace else count
                first = run.first_entry_id + start
                payloads, crcs = (run.payloads, run.crcs) if end - start == count \
                    else (run.payloads[start:end], run.crcs[start:end])
                batch.put_locations(run.ledger_id, first, self.entry_log.append_run(
                    run.ledger_id, first, payloads, crcs))
                entries_left -= end - start
                start = end
                if not pace:
                    continue
                if self.entry_log.unsynced_bytes >= self._sync_every_bytes:
                    self.entry_log.sync()
                if entries_left == 0:
                    entries_left = _PACED_SLICE_ENTRIES
                    if not self.write_cache.is_half_full():
                        time.sleep(_PACED_PAUSE_S)
        return batch

    def _piece_end(self, payloads: list[bytes], start: int, entries_left: int) -> int:
        """Where a paced checkpoint's next piece of a run ends: after at most
        ``entries_left`` entries, and at the latest with the one that brings
        the entry log's unsynced bytes to ``sync_every_bytes``."""
        end = min(len(payloads), start + entries_left)
        room = self._sync_every_bytes - self.entry_log.unsynced_bytes
        sizes = itertools.accumulate(map(len, payloads[start:end]))
        return start + min(end - start, bisect.bisect_left(list(sizes), room) + 1)

    def commit(self, batch: IndexBatch, *, records: Iterable[LedgerRecord],
               deleted: Iterable[int], journal_mark: int, next_ledger_id: int,
               dropped_below: Mapping[int, int] | None = None,
               replica_records: Iterable[ReplicaRecord] = (),
               replicas_deleted: Iterable[int] = ()) -> None:
        """One synced index batch: the locations (of entry-log bytes already
        synced), the ledger and replica records, deletions, the locations of
        entries whose local copy is dropped (after the locations this very batch
        puts, so entries written now are dropped too) and the checkpoint mark."""
        for record in records:
            batch.put_ledger(record)
        for ledger_id in deleted:
            batch.delete_ledger(ledger_id)
            self.read_cache.drop_ledger(ledger_id)
        for ledger_id, below in (dropped_below or {}).items():
            batch.delete_locations_below(ledger_id, below)
        for replica in replica_records:
            batch.put_replica(replica)
        for ledger_id in replicas_deleted:
            batch.delete_replica(ledger_id)
        batch.set_checkpoint(journal_mark, next_ledger_id)
        self.index.commit(batch)
        for ledger_id, below in (dropped_below or {}).items():
            self.read_cache.drop_ledger(ledger_id, below=below)

    def close(self) -> None:
        self.entry_log.close()
        self.index.close()
