"""The checkpoint: a persisted multi-step operation (STYLE 8), in named steps.

1. ``FROZEN``            under the add lock: note the journal's appended offset
                         (the mark), swap the write caches, take the ledger
                         table's changes.
2. ``JOURNAL_SYNCED``    wait until the journal is synced to the mark, so every
                         snapshotted entry is acknowledged.
3. ``ENTRIES_WRITTEN``   the frozen buffer, sorted by (ledger, entry), appended to
                         the current entry log.
4. ``ENTRY_LOG_SYNCED``  fdatasync of the entry log: data is durable before
                         anything points at it.
5. ``INDEX_COMMITTED``   one synced RocksDB batch: locations, ledger records,
                         deletions, the mark and the next ledger id.
6. ``JOURNAL_TRIMMED``   the journal trimmed to the mark (header rewrite + sync).
7. ``RELEASED``          the frozen buffer dropped; waiting adds wake.

A crash between any two steps loses nothing: until step 5 commits, the journal
still holds every record past the previous mark; after it, replay skips records
at or below the new mark.  A step that fails keeps what is acknowledged
readable: the frozen buffer is not dropped.  A full disk (``DiskFull`` from the
entry log, which rolled back to its last sync) is not a failure of the data:
the snapshot is kept whole — buffer, mark and table changes, which belong
together — and the next checkpoint writes it again before freezing anything
new, until space is freed.  Any other failure gives the table's changes back,
and the bookie refuses writes from then on (latched, as PostgreSQL does after a
failed fsync), so a restart replays the journal.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from common.errors import DiskFull
from journal import Journal

from ._appender import Appender
from ._storage import EntryStorage
from ._table import LedgerTable, TableChanges
from ._write_cache import WriteCacheBuffer

log = logging.getLogger(__name__)


class CheckpointStep(enum.Enum):
    FROZEN = "frozen"
    JOURNAL_SYNCED = "journal_synced"
    ENTRIES_WRITTEN = "entries_written"
    ENTRY_LOG_SYNCED = "entry_log_synced"
    INDEX_COMMITTED = "index_committed"
    JOURNAL_TRIMMED = "journal_trimmed"
    RELEASED = "released"


# Called after each step (tests kill the process there).
CheckpointHook = Callable[[CheckpointStep], None]


@dataclass(frozen=True, slots=True)
class _Snapshot:
    mark: int
    frozen: WriteCacheBuffer
    live: set[int]
    changes: TableChanges


@dataclass(frozen=True, slots=True)
class CheckpointResult:
    entry_count: int
    byte_count: int
    duration_s: float


class Checkpointer:
    def __init__(self, *, appender: Appender, table: LedgerTable, journal: Journal,
                 storage: EntryStorage, step_hook: CheckpointHook | None = None) -> None:
        self.lock = threading.Lock()  # one checkpoint (or index batch of compaction) at a time
        self._appender = appender
        self._table = table
        self._journal = journal
        self._storage = storage
        self._hook = step_hook
        self.count = 0
        self.last: CheckpointResult | None = None
        self.mark = 0  # the journal offset the index covers
        # See :attr:`unindexed_from`; set only while a checkpoint writes entries.
        self._unindexed_from: int | None = None
        # A snapshot a full disk kept from the entry log; written before any other.
        self._stalled: _Snapshot | None = None

    @property
    def unindexed_from(self) -> int | None:
        """The first entry log that may hold records of this checkpoint whose
        locations are not committed yet (None: no checkpoint is writing).  A
        checkpoint may fill and seal logs before its index batch commits, so a
        sealed log is not yet described by the index: GC must not judge it by
        the index (compaction copies only what the index points at, and a
        ledger tiered while open counts only its indexed entries)."""
        return self._unindexed_from

    @property
    def stalled(self) -> bool:
        """True while a checkpoint waits for the disk to have room."""
        return self._stalled is not None

    def run(self, *, mark: int | None = None, replaying: bool = False) -> CheckpointResult:
        """One checkpoint.  ``replaying``: during recovery, with the journal not yet
        started (nothing to wait for, nothing to trim: the caller trims later)."""
        with self.lock:
            started = time.monotonic()
            snap, self._stalled = self._stalled or self._freeze(mark), None
            self._step(CheckpointStep.FROZEN)
            with self._appender.lock:
                # A stalled snapshot written again leaves out ledgers deleted since
                # its freeze: their DELETE follows its mark in the journal.  Only
                # the snapshot's ledgers are asked, never every ledger held.
                live = {i for i in snap.live if self._table.is_local(i)}
            try:
                if not replaying:
                    self._journal.wait_synced(snap.mark)
                    self._step(CheckpointStep.JOURNAL_SYNCED)
                self._unindexed_from = self._storage.entry_log.current_log_id
                batch = self._storage.write_entries(snap.frozen, live=live,
                                                     pace=not replaying)
                self._step(CheckpointStep.ENTRIES_WRITTEN)
                self._storage.entry_log.sync()
                self._step(CheckpointStep.ENTRY_LOG_SYNCED)
                self._storage.commit(batch, records=snap.changes.records,
                                     deleted=snap.changes.deleted, journal_mark=snap.mark,
                                     next_ledger_id=snap.changes.next_ledger_id,
                                     dropped_below=snap.changes.dropped_below,
                                     replica_records=snap.changes.replica_records,
                                     replicas_deleted=snap.changes.replica_deleted)
                # Their locations below an id are gone from the index now: GC
                # measures again the logs holding them.
                self._table.note_liveness(snap.changes.dropped_below)
            except DiskFull:
                self._stalled = snap
                raise
            except BaseException:
                # Nothing of it is in the index: keep the entries readable where
                # they are and the changes for whoever checkpoints next.
                with self._appender.lock:
                    self._table.restore_changes(snap.changes)
                raise
            finally:
                # Committed, or given up (what was written is garbage; a stalled
                # snapshot is written again elsewhere, so GC may reclaim it).
                self._unindexed_from = None
            self.mark = snap.mark
            self._step(CheckpointStep.INDEX_COMMITTED)
            # Closed, idle ledgers it committed are kept as their records from
            # now on (encoded here, swapped under the add lock: a dict store each).
            sleepers = self._table.sleepers(snap.changes.records)
            if sleepers:
                with self._appender.lock:
                    self._table.put_to_sleep(sleepers)
            if not replaying:
                self._journal.trim(snap.mark)
                self._step(CheckpointStep.JOURNAL_TRIMMED)
            self._storage.write_cache.release_frozen()
            self._step(CheckpointStep.RELEASED)
            result = CheckpointResult(batch.location_count, snap.frozen.size_bytes,
                                      time.monotonic() - started)
            self.count += 1
            self.last = result
            log.debug("checkpoint mark=%d entries=%d bytes=%d duration_s=%.4f", snap.mark,
                      result.entry_count, result.byte_count, result.duration_s)
            return result

    def commit_deletions(self) -> int:
        """Commit the ledgers deleted since the last checkpoint, and nothing else:
        how a full disk is dug out.  Deleting is safe at any time (a replayed
        record of a deleted ledger is dropped), and once committed their entries
        are garbage GC can reclaim, while a stalled checkpoint still waits for
        the room those deletions free.  Returns how many."""
        with self.lock:
            with self._appender.lock:
                deleted = self._table.take_deletions()
            if not deleted:
                return 0
            batch = self._storage.index.batch()
            for ledger_id in deleted:
                batch.delete_ledger(ledger_id)
            try:
                self._storage.index.commit(batch)
            except BaseException:
                with self._appender.lock:
                    self._table.restore_deletions(deleted)
                raise
            for ledger_id in deleted:
                self._storage.read_cache.drop_ledger(ledger_id)
            return len(deleted)

    def _freeze(self, mark: int | None) -> _Snapshot:
        """Under the add lock, so it costs what changed since the last
        checkpoint (the ledgers in the buffer, the table's changes), never
        what the bookie holds: every add waits for it."""
        with self._appender.lock:
            frozen = self._storage.write_cache.swap()
            return _Snapshot(
                mark=self._journal.appended_offset if mark is None else mark,
                frozen=frozen,
                live={i for i in frozen.ledgers if self._table.is_local(i)},
                changes=self._table.take_changes())

    def _step(self, step: CheckpointStep) -> None:
        if self._hook is not None:
            self._hook(step)
