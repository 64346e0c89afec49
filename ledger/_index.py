"""RocksDB index (via rocksdict, and the only module that imports it).

Column families:

=============  ==========================================  ==========================
family         key                                         value
=============  ==========================================  ==========================
``locations``  ledger_id u64 BE ++ entry_id u64 BE (16 B)  log_id u64 BE ++ offset u64 BE
``ledgers``    ledger_id u64 BE (8 B)                       LedgerRecord (packed)
``replicas``   ledger_id u64 BE (8 B)                       ReplicaRecord (25 B, see
                                                            ``_replica_table.py``)
default        b"checkpoint"                                journal offset u64 BE
default        b"next_ledger_id"                            u64 BE
default        b"relocating_from"                           log id u64 BE (compaction
                                                            copies not yet indexed)
default        b"suspect_logs"                              n x log id u64 BE (logs that
                                                            may hold such copies)
default        b"uncompacted"                               n x (lo u64 BE ++ hi u64 BE):
                                                            storage ids with range
                                                            deletes not yet compacted
=============  ==========================================  ==========================

A replica's locations are keyed by its storage id (``ledger_id | 2^63``), so
they never meet a standalone ledger's.
Big-endian keys sort by (ledger, entry), so a ledger's locations are one range
(``delete_range`` drops them) and a range read is one iterator.  Every
checkpoint writes one synced WriteBatch, so the index never points at entry-log
bytes that were not fsynced before it, and a crash leaves either the whole batch
or none of it.

Deleting does not give space back by itself: a ``delete_range`` is one
tombstone over the ledger's keys, and the deleted records stay in the WAL, the
memtables and the SST files until a compaction drops them.  So every batch
that deletes a range also widens the ``uncompacted`` spans it persists (one
for standalone ledgers, one for replicas, whose storage ids sit above
``2^63``), and :meth:`LocationIndex.compact_deleted` — GC calls it — flushes
the memtables (the WAL holding the deleted records can then go) and compacts
those spans of the locations and ledger-record families, as BookKeeper's
``EntryLocationIndex.removeOffsetFromDeletedLedgers`` follows its
``deleteRange`` with ``compactRange``.  A crash before that compaction leaves
the spans persisted with the deletes, so the next GC compacts them.
"""

from __future__ import annotations

import collections
import itertools
import struct
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

from rocksdict import (
    BlockBasedOptions,
    BottommostLevelCompaction,
    Cache,
    CompactOptions,
    Options,
    Rdict,
    ReadOptions,
    WriteBatch,
    WriteBufferManager,
    WriteOptions,
)

from common.errors import DeviceBroken, DiskFull, NoSuchEntry
from common.files import make_directory
from entrylog import Location, LocationRun

from ._ledger_record import LedgerRecord
from ._replica_table import ReplicaRecord, replica_storage_id

_KEY = struct.Struct(">QQ")
_LEDGER_KEY = struct.Struct(">Q")
_VALUE = struct.Struct(">QQ")
_U64 = struct.Struct(">Q")
_CHECKPOINT_KEY = b"checkpoint"
_NEXT_LEDGER_KEY = b"next_ledger_id"
_RELOCATING_KEY = b"relocating_from"
_SUSPECTS_KEY = b"suspect_logs"
_UNCOMPACTED_KEY = b"uncompacted"
_SPAN = struct.Struct(">QQ")
_U64_MAX = 2**64 - 1
_LOCATIONS = "locations"
_LEDGERS = "ledgers"
_REPLICAS = "replicas"
# RocksDB's block cache and memtables together, whatever the ledgers held
# (INDEX_MEMORY).
INDEX_MEMORY_BYTES = 32 * 1024 * 1024
# The memtables' share of it: an eighth (4 MiB of the default) flushed a
# checkpoint's 90,000 locations as fast as a quarter did (docs/architecture.md,
# "The index's memory"), and held 40 B less per ledger at 100,000.
_MEMTABLE_SHARE = 8
_MEMTABLE_BYTES_MIN = 1024 * 1024


# Storage-id spans (lo, hi inclusive) whose range deletes are not compacted yet,
# by half: 0 for standalone ledgers, 1 for replicas (ids with the top bit set).
# Two spans rather than one, or deleting one replica would make the span cover
# every standalone ledger too.
Spans = dict[int, tuple[int, int]]


def _widen(spans: Spans, lo: int, hi: int) -> None:
    half = lo >> 63
    old_lo, old_hi = spans.get(half, (lo, hi))
    spans[half] = (min(old_lo, lo), max(old_hi, hi))


def _encode_spans(spans: Spans) -> bytes:
    return b"".join(_SPAN.pack(*spans[half]) for half in sorted(spans))


def _decode_spans(raw: bytes) -> Spans:
    spans: Spans = {}
    for lo, hi in _SPAN.iter_unpack(raw):
        _widen(spans, lo, hi)
    return spans


def _bulk_scan() -> ReadOptions:
    """A scan of every record (start-up) leaves the block cache to reads."""
    options = ReadOptions()
    options.fill_cache(False)  # type: ignore[call-arg]  # the stub drops the argument
    return options


def _options(memory_bytes: int) -> tuple[Options, dict[str, Options]]:
    """The database's options and its column families', under one memory
    budget: one LRU block cache for all three families (RocksDB's default is
    a cache of its own per family), and their memtables charged to that cache
    by a write buffer manager, which flushes the largest memtable once they
    hold an eighth of the budget.  Without it each family keeps up to its
    64 MiB write buffer of recent index writes in memory: a constant, but one
    that dwarfed what a hundred thousand idle ledgers cost in Python
    (docs/architecture.md, "The index's memory")."""
    cache = Cache(memory_bytes)
    table = BlockBasedOptions()
    table.set_block_cache(cache)
    opts = Options(raw_mode=True)
    opts.set_write_buffer_manager(WriteBufferManager.new_write_buffer_manager_with_cache(
        max(memory_bytes // _MEMTABLE_SHARE, _MEMTABLE_BYTES_MIN), False, cache))
    families = {name: Options(raw_mode=True) for name in (_LOCATIONS, _LEDGERS, _REPLICAS)}
    for each in (opts, *families.values()):
        each.set_block_based_table_factory(table)
    opts.create_if_missing(True)
    opts.create_missing_column_families(True)
    # RocksDB's info log (LOG) otherwise grows without bound and a restart
    # keeps up to 1000 old ones: bounded, so the index directory measures
    # the index.
    opts.set_max_log_file_size(1024 * 1024)
    opts.set_keep_log_file_num(4)
    return opts, families


class IndexBatch:
    """Everything one checkpoint writes to the index, applied atomically."""

    def __init__(self, index: LocationIndex) -> None:
        self._index = index
        self._batch = WriteBatch(raw_mode=True)
        self.location_count = 0
        self.deleted_spans: Spans = {}  # what this batch range-deletes, for compaction

    def put_location(self, ledger_id: int, entry_id: int, location: Location) -> None:
        self._batch.put(_KEY.pack(ledger_id, entry_id), _VALUE.pack(*location),
                        self._index.locations_handle)
        self.location_count += 1

    def put_locations(self, ledger_id: int, first_entry_id: int,
                      runs: Sequence[LocationRun]) -> None:
        """``put_location`` for the ledger's entries ``first_entry_id, …`` at the
        offsets ``runs`` give in order (as ``EntryLogStore.append_run`` returns
        them).  Built by ``map`` and drained by a zero-length deque, so no
        Python runs per entry: a checkpoint indexes every entry it flushes."""
        put, handle = self._batch.put, self._index.locations_handle
        entry_id = first_entry_id
        for log_id, offsets in runs:
            keys = map(_KEY.pack, itertools.repeat(ledger_id),
                       range(entry_id, entry_id + len(offsets)))
            values = map(_VALUE.pack, itertools.repeat(log_id), offsets)
            collections.deque(map(put, keys, values, itertools.repeat(handle)), maxlen=0)
            entry_id += len(offsets)
        self.location_count += entry_id - first_entry_id

    def put_ledger(self, record: LedgerRecord) -> None:
        self._batch.put(_LEDGER_KEY.pack(record.ledger_id), record.encode(),
                        self._index.ledgers_handle)

    def delete_ledger(self, ledger_id: int) -> None:
        self._batch.delete(_LEDGER_KEY.pack(ledger_id), self._index.ledgers_handle)
        self.delete_locations(ledger_id)

    def put_replica(self, record: ReplicaRecord) -> None:
        self._batch.put(_LEDGER_KEY.pack(record.ledger_id), record.encode(),
                        self._index.replicas_handle)

    def delete_replica(self, ledger_id: int) -> None:
        self._batch.delete(_LEDGER_KEY.pack(ledger_id), self._index.replicas_handle)
        self.delete_locations(replica_storage_id(ledger_id))

    def delete_locations(self, ledger_id: int) -> None:
        """One range tombstone over all the ledger's locations, however many."""
        self._batch.delete_range(_KEY.pack(ledger_id, 0), _KEY.pack(ledger_id + 1, 0),
                                 self._index.locations_handle)
        _widen(self.deleted_spans, ledger_id, ledger_id)

    def delete_locations_below(self, ledger_id: int, entry_id: int) -> None:
        """Locations of the ledger's entries ``0..entry_id - 1`` (tiered, dropped)."""
        self._batch.delete_range(_KEY.pack(ledger_id, 0), _KEY.pack(ledger_id, entry_id),
                                 self._index.locations_handle)
        _widen(self.deleted_spans, ledger_id, ledger_id)

    def set_checkpoint(self, journal_offset: int, next_ledger_id: int) -> None:
        self._batch.put(_CHECKPOINT_KEY, _U64.pack(journal_offset))
        self._batch.put(_NEXT_LEDGER_KEY, _U64.pack(next_ledger_id))

    def set_relocating_from(self, log_id: int | None) -> None:
        if log_id is None:
            self._batch.delete(_RELOCATING_KEY)
        else:
            self._batch.put(_RELOCATING_KEY, _U64.pack(log_id))

    def set_suspect_logs(self, log_ids: list[int]) -> None:
        self._batch.put(_SUSPECTS_KEY, b"".join(_U64.pack(i) for i in sorted(log_ids)))

    @property
    def raw(self) -> WriteBatch:
        return self._batch


class LocationIndex:
    """Entry locations and ledger metadata in one RocksDB instance."""

    def __init__(self, path: Path, *, memory_bytes: int = INDEX_MEMORY_BYTES) -> None:
        try:
            make_directory(path)
        except OSError as exc:
            raise DeviceBroken(f"cannot create the index directory {path}: {exc}") from exc
        self.path = path
        options, families = _options(memory_bytes)
        try:
            self._db = Rdict(str(path), options, column_families=families)
        except Exception as exc:  # rocksdict raises plain Exception for I/O and lock errors
            raise DeviceBroken(f"cannot open the RocksDB index at {path}: {exc}") from exc
        self._locations = self._db.get_column_family(_LOCATIONS)
        self._ledgers = self._db.get_column_family(_LEDGERS)
        self._replicas = self._db.get_column_family(_REPLICAS)
        self.locations_handle = self._db.get_column_family_handle(_LOCATIONS)
        self.ledgers_handle = self._db.get_column_family_handle(_LEDGERS)
        self.replicas_handle = self._db.get_column_family_handle(_REPLICAS)
        self._synced = WriteOptions()
        self._synced.sync = True
        # Guards the uncompacted spans: commits widen them, compact_deleted
        # clears them, from different threads (checkpoint, GC).
        self._spans_lock = threading.Lock()
        self._uncompacted = _decode_spans(bytes(self._db.get(_UNCOMPACTED_KEY) or b""))
        self._spans_version = 0  # bumped by every commit that widens them

    def batch(self) -> IndexBatch:
        return IndexBatch(self)

    def commit(self, batch: IndexBatch) -> None:
        if not batch.deleted_spans:
            self._write(batch.raw, self._synced)
            return
        with self._spans_lock:
            spans = dict(self._uncompacted)
            for lo, hi in batch.deleted_spans.values():
                _widen(spans, lo, hi)
            # In the deleting batch itself: a crash cannot keep the tombstones
            # and lose the spans that tell GC to compact them away.
            batch.raw.put(_UNCOMPACTED_KEY, _encode_spans(spans))
            self._write(batch.raw, self._synced)
            self._uncompacted = spans
            self._spans_version += 1

    def _write(self, batch: WriteBatch, options: WriteOptions) -> None:
        try:
            self._db.write(batch, options)
        except Exception as exc:
            # rocksdict raises plain exceptions; RocksDB names a full disk in the message.
            if "No space left" in str(exc):
                raise DiskFull(f"RocksDB write to {self.path} failed: {exc}") from exc
            raise DeviceBroken(f"RocksDB write to {self.path} failed: {exc}") from exc

    def uncompacted_spans(self) -> Spans:
        """Storage-id spans deleted but not compacted yet (tests, GC)."""
        with self._spans_lock:
            return dict(self._uncompacted)

    def compact_deleted(self) -> bool:
        """Give the space of deleted ranges back: flush every family's memtable
        (the WAL files that held the deleted records become obsolete and are
        removed) and compact the uncompacted spans of the locations and ledger
        records (or replica records), down to the bottom level so the range
        tombstones and what they cover are dropped.  RocksDB's own threads do
        the work and the GIL is released while it runs, so adds, reads and
        checkpoints go on; no engine lock is held.  False when nothing was
        deleted since the last call.  Safe to interrupt anywhere: the spans
        are cleared only after the compaction finished."""
        with self._spans_lock:
            spans, version = dict(self._uncompacted), self._spans_version
        if not spans:
            return False
        options = CompactOptions()
        options.set_bottommost_level_compaction(BottommostLevelCompaction.force_optimized())
        try:
            for family in (self._db, self._locations, self._ledgers, self._replicas):
                family.flush(True)
            for half, (lo, hi) in sorted(spans.items()):
                end = None if hi == _U64_MAX else hi + 1
                self._locations.compact_range(
                    _KEY.pack(lo, 0), None if end is None else _KEY.pack(end, 0), options)
                # Records are keyed by the ledger id, without the replica bit.
                records = self._replicas if half else self._ledgers
                first, last = lo & ~(1 << 63), hi & ~(1 << 63)
                records.compact_range(_LEDGER_KEY.pack(first), _LEDGER_KEY.pack(last + 1)
                                      if last + 1 < 2**63 else None, options)
        except Exception as exc:
            if "No space left" in str(exc):
                raise DiskFull(f"RocksDB compaction of {self.path} failed: {exc}") from exc
            raise DeviceBroken(f"RocksDB compaction of {self.path} failed: {exc}") from exc
        with self._spans_lock:
            if self._spans_version == version:
                # Not synced: if lost in a crash, the next GC compacts the same
                # spans once more, which only costs time.
                batch = WriteBatch(raw_mode=True)
                batch.delete(_UNCOMPACTED_KEY)
                self._write(batch, WriteOptions())
                self._uncompacted = {}
            # Else deletions committed meanwhile widened the spans: keep them
            # all (compacted again next time, which is only time).
        return True

    def size_bytes(self) -> int:
        """Bytes of every file in the index directory (SSTs, WAL, manifest, logs)."""
        total = 0
        for path in self.path.iterdir():
            try:
                total += path.stat().st_size
            except FileNotFoundError:  # RocksDB removed it meanwhile
                continue
        return total

    def location(self, ledger_id: int, entry_id: int) -> Location:
        """Where the entry lives; NoSuchEntry when the index has none."""
        raw = self._locations.get(_KEY.pack(ledger_id, entry_id))
        if raw is None:
            raise NoSuchEntry(ledger_id, entry_id)
        return Location(*_VALUE.unpack(raw))

    def ledgers(self) -> Iterator[LedgerRecord]:
        for _ledger_id, raw in self.raw_ledgers():
            yield LedgerRecord.decode(raw)

    def raw_ledgers(self) -> Iterator[tuple[int, bytes]]:
        """Every ledger record as stored, in id order (``LedgerTable`` decodes
        only those it must)."""
        for key, raw in self._ledgers.items(read_opt=_bulk_scan()):
            (ledger_id,) = _LEDGER_KEY.unpack(bytes(key))  # type: ignore[arg-type]
            yield ledger_id, bytes(raw)

    def replicas(self) -> Iterator[ReplicaRecord]:
        for key, raw in self._replicas.items(read_opt=_bulk_scan()):
            (ledger_id,) = _LEDGER_KEY.unpack(bytes(key))  # type: ignore[arg-type]
            yield ReplicaRecord.decode(ledger_id, bytes(raw))

    def entry_ids_between(self, ledger_id: int, first: int, last: int) -> Iterator[int]:
        """Entry ids of ``ledger_id`` in ``first … last`` with a location, in order."""
        for key, _raw in self._locations.items(from_key=_KEY.pack(ledger_id, first)):
            lid, eid = _KEY.unpack(key)  # type: ignore[arg-type]  # raw mode: keys are bytes
            if lid != ledger_id or eid > last:
                return
            yield eid

    def location_count(self, ledger_id: int) -> int:
        """Number of indexed entries of one ledger (used by tests and verify)."""
        return sum(1 for _ in self.locations_of(ledger_id))

    def locations_of(self, ledger_id: int) -> Iterator[tuple[int, int, int]]:
        """(entry_id, log_id, offset) of one ledger in entry order."""
        start = _KEY.pack(ledger_id, 0)
        for key, raw in self._locations.items(from_key=start):
            lid, eid = _KEY.unpack(key)  # type: ignore[arg-type]  # raw mode: keys are bytes
            if lid != ledger_id:
                return
            log_id, offset = _VALUE.unpack(bytes(raw))
            yield eid, log_id, offset

    def checkpoint(self) -> tuple[int, int]:
        """(journal offset covered by the index, next ledger id)."""
        mark = self._db.get(_CHECKPOINT_KEY)
        nxt = self._db.get(_NEXT_LEDGER_KEY)
        return (_U64.unpack(bytes(mark))[0] if mark else 0,
                _U64.unpack(bytes(nxt))[0] if nxt else 1)

    def relocating_from(self) -> int | None:
        raw = self._db.get(_RELOCATING_KEY)
        return None if raw is None else int(_U64.unpack(bytes(raw))[0])

    def suspect_logs(self) -> list[int]:
        raw = bytes(self._db.get(_SUSPECTS_KEY) or b"")
        return [i for (i,) in _U64.iter_unpack(raw)]

    def close(self) -> None:
        # Column-family handles keep the DB (and its LOCK file) alive until
        # they are dropped, which would make a reopen in this process fail.
        del self.locations_handle, self.ledgers_handle, self.replicas_handle
        self._locations.close()
        self._ledgers.close()
        self._replicas.close()
        self._db.close()
