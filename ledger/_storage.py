"""Entry storage below the journal: write cache → entry log → RocksDB index,
and the read path back through the caches (BookKeeper's DbLedgerStorage).

This layer knows entries, not ledger semantics: the bookie decides what is
readable (LAC) and when to checkpoint; this layer moves bytes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass

from common.errors import CorruptRecord
from entrylog import EntryLogStore, Location

from ._index import LocationIndex
from ._ledger_record import LedgerRecord
from ._read_cache import ReadCache
from ._write_cache import WriteCache, WriteCacheBuffer
from .settings import EngineSettings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FlushResult:
    entry_count: int
    byte_count: int
    duration_s: float


class EntryStorage:
    def __init__(self, settings: EngineSettings, *, index: LocationIndex,
                 entry_log: EntryLogStore) -> None:
        self.settings = settings
        self.index = index
        self.entry_log = entry_log
        self.write_cache = WriteCache(settings.write_cache.size_bytes)
        self.read_cache = ReadCache(settings.read_cache.size_bytes)

    # --- read path -------------------------------------------------------

    def get(self, ledger_id: int, entry_id: int) -> tuple[bytes, int]:
        """(payload, crc32c) of a stored entry; NoSuchEntry when it is nowhere."""
        hit = self.write_cache.get(ledger_id, entry_id)
        if hit is None:
            hit = self.read_cache.get(ledger_id, entry_id)
        if hit is not None:
            return hit
        # The index is consulted after both caches: a frozen buffer is dropped
        # only after its locations committed, so a miss above means a hit here.
        location = Location(*self.index.location(ledger_id, entry_id))
        try:
            payload, crc = self.entry_log.read(location, ledger_id, entry_id)
        except CorruptRecord:
            # Compaction may have moved the entry and removed its old log
            # between the index lookup and the read; then the index says so.
            moved = Location(*self.index.location(ledger_id, entry_id))
            if moved == location:
                raise
            location = moved
            payload, crc = self.entry_log.read(location, ledger_id, entry_id)
        self._read_ahead(location, ledger_id)
        return payload, crc

    def _read_ahead(self, location: Location, ledger_id: int) -> None:
        rc = self.settings.read_cache
        if rc.size_bytes == 0:
            return
        try:
            following = self.entry_log.read_following(
                location, ledger_id, bytes_max=rc.readahead_bytes_max,
                count_max=rc.readahead_entry_count_max)
        except CorruptRecord as exc:
            # Read-ahead is only a guess (compaction may just have removed the
            # log); the entries it skips are read, and checked, when asked for.
            log.debug("read-ahead skipped: %s", exc)
            return
        for entry_id, payload, crc, _loc in following:
            self.read_cache.put(ledger_id, entry_id, payload, crc)

    # --- flush path ------------------------------------------------------

    def flush(self, frozen: WriteCacheBuffer, *, live: set[int],
              records: Iterable[LedgerRecord], deleted: Iterable[int],
              journal_mark: int, next_ledger_id: int) -> FlushResult:
        """Write a frozen buffer to the entry log, fsync it, then commit its
        locations, the ledger records and the checkpoint mark in one synced
        batch. Entries of ledgers not in ``live`` (deleted) are dropped."""
        started = time.monotonic()
        batch = self.index.batch()
        count = nbytes = 0
        for (ledger_id, entry_id), (payload, crc) in frozen.sorted_items():
            if ledger_id not in live:
                continue
            location = self.entry_log.append(ledger_id, entry_id, payload, crc)
            batch.put_location(ledger_id, entry_id, location.log_id, location.offset)
            count += 1
            nbytes += len(payload)
        # Data is durable before anything points to it (torn entry log vs index).
        self.entry_log.sync()
        for record in records:
            batch.put_ledger(record)
        for ledger_id in deleted:
            batch.delete_ledger(ledger_id)
            self.read_cache.drop_ledger(ledger_id)
        batch.set_checkpoint(journal_mark, next_ledger_id)
        self.index.commit(batch)
        return FlushResult(count, nbytes, time.monotonic() - started)

    def close(self) -> None:
        self.entry_log.close()
        self.index.close()
