"""The engine facade: ledgers and entries on top of the journal and storage.

Add path: validate → encode the journal body (outside the lock) → under the add
lock assign entry ids, append to the journal and put the entries into the
active write cache → the journal's sync thread acknowledges in offset order,
which advances the LAC and resolves the caller's future.

Checkpoint path (see :meth:`Bookie.checkpoint`): under the add lock note the
journal position and swap the write caches → wait until the journal is synced
to that position → entry log append + fsync → one synced index batch → trim the
journal → release the frozen buffer.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Protocol, TypeVar

import crc32c

from common.errors import (
    Backpressure,
    BadRequest,
    CorruptRecord,
    DeviceBroken,
    EntryConflict,
    EntryTooLarge,
    JournalFull,
    LedgerClosed,
    LedgerFenced,
    NoSuchEntry,
    NoSuchLedger,
    ReadOnly,
    StorageUnavailable,
    Unauthorized,
    WouldBlock,
    WriteCacheFull,
)
from entrylog import EntryLogStore, Location
from journal import Journal, JournalAppend

from . import _events as events
from ._flusher import Flusher
from ._index import MAX_ID, LocationIndex
from ._ledger_record import LedgerRecord
from ._live_ledger import LiveLedger
from ._model import (
    AddResult,
    BatchAddResult,
    Entry,
    LedgerInfo,
    LedgerState,
    OffloadInfo,
    OffloadState,
)
from ._password import PasswordHash, PasswordVerifier
from ._replay import ReplayReport, replay_journal
from ._storage import EntryStorage
from ._write_cache import WriteCacheBuffer
from .settings import EngineSettings

log = logging.getLogger(__name__)
T = TypeVar("T")
# Journal record overhead and alignment slack reserved when waiting for space.
_RECORD_SLACK_BYTES = 4096 + 64


class RemoteEntryReader(Protocol):
    """Reads entries of offloaded ledgers whose local copy is gone (offload/)."""

    def read_entry(self, ledger_id: int, entry_id: int,
                   info: OffloadInfo) -> tuple[bytes, int]: ...


@dataclass(frozen=True)
class Relocation:
    """One entry compaction copied: the index moves from ``old`` to ``new``."""

    ledger_id: int
    entry_id: int
    old: Location
    new: Location


class _NeedSpace(Exception):
    """Internal: an attempt found no room; ``wait`` blocks until there may be."""

    def __init__(self, error: Backpressure, wait: Callable[[float], bool]) -> None:
        super().__init__(str(error))
        self.error = error
        self.wait = wait


@dataclass(frozen=True)
class _Snapshot:
    mark: int
    frozen: WriteCacheBuffer
    live: set[int]
    records: list[LedgerRecord]
    deleted: set[int]
    next_ledger_id: int


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

    def as_dict(self) -> dict[str, int | float]:
        return {k: (int(v) if isinstance(v, bool) else v) for k, v in asdict(self).items()}


class Bookie:
    """Create/add/read/fence/close/delete ledgers; thread-safe; usable without HTTP."""

    def __init__(self, settings: EngineSettings, *, journal: Journal,
                 storage: EntryStorage) -> None:
        self.settings = settings
        self.journal = journal
        self.storage = storage
        self._lock = threading.Lock()
        self._checkpoint_lock = threading.Lock()
        self._verifier = PasswordVerifier()
        self._ledgers: dict[int, LiveLedger] = {}
        self._dirty: set[int] = set()
        self._deleted: set[int] = set()
        self._index_mark, self._next_ledger_id = storage.index.checkpoint()
        for record in storage.index.ledgers():
            self._ledgers[record.ledger_id] = LiveLedger.from_record(record)
        self._read_only = False
        self._broken: BaseException | None = None
        self._closed = False
        # adds under _lock, checkpoints under _checkpoint_lock, reads under their own.
        self._counters = {"adds": 0, "add_bytes": 0, "reads": 0, "checkpoints": 0}
        self._read_count_lock = threading.Lock()
        self._last_checkpoint = (0.0, 0)
        self.replay_report: ReplayReport | None = None
        self._remote: RemoteEntryReader | None = None
        self._flusher = Flusher(self.checkpoint, interval_s=settings.write_cache.flush_interval_s,
                                on_failure=self._mark_broken)

    # --- lifecycle -------------------------------------------------------

    @classmethod
    def open(cls, settings: EngineSettings) -> Bookie:
        """Open (or create) the stores, replay the journal, start background threads."""
        settings.check()
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        index = LocationIndex(settings.index_path)
        try:
            entry_log = EntryLogStore(settings.entry_log)
            journal = Journal.open(settings.journal)
        except BaseException:
            index.close()
            raise
        bookie = cls(settings, journal=journal,
                     storage=EntryStorage(settings, index=index, entry_log=entry_log))
        bookie._recover()
        return bookie

    def _recover(self) -> None:
        self._adopt_interrupted_relocation()
        self.replay_report = replay_journal(self, self.journal.replay(), self._index_mark)
        self.journal.start()
        self._flusher.start()
        # Persist what replay rebuilt so the journal can be trimmed past any hole.
        self.checkpoint()
        log.info("bookie ready ledgers=%d replay=%s", len(self._ledgers), self.replay_report)

    def close(self) -> None:
        """Clean shutdown: stop the flusher, checkpoint everything, close the stores."""
        if self._closed:
            return
        self._closed = True
        self._flusher.stop()
        try:
            if self._broken is None:
                self.checkpoint()
        finally:
            self.journal.close()
            self.storage.close()

    # --- ledgers ---------------------------------------------------------

    def create_ledger(self, *, password: str,
                      metadata: Mapping[str, str]) -> Future[LedgerInfo]:
        self._check_writable()
        hashed = PasswordHash.create(password)
        now = time.time()

        def attempt() -> tuple[JournalAppend, LiveLedger]:
            with self._lock:
                self._check_writable()
                ledger_id = self._next_ledger_id
                body = events.encode_create(events.CreateEvent(ledger_id, now, hashed,
                                                               dict(metadata)))
                append = self._journal_append(body)
                self._next_ledger_id += 1
                ledger = LiveLedger(ledger_id=ledger_id, state=LedgerState.OPEN,
                                    password=hashed, created_at=now, closed_at=None,
                                    metadata=dict(metadata))
                self._ledgers[ledger_id] = ledger
                self._dirty.add(ledger_id)
                return append, ledger

        append, ledger = self._retrying(attempt)
        self._verifier.remember(ledger.ledger_id, password)
        return self._after_sync(append, ledger.info)

    def get_ledger(self, ledger_id: int) -> LedgerInfo:
        return self._ledger(ledger_id).info()

    def authorize(self, ledger_id: int, *, password: str, block: bool = True) -> LedgerInfo:
        """The ledger, once ``password`` is known to be its password: NoSuchLedger,
        Unauthorized.  For callers that check once and then add many times (append
        streams check at the upgrade).  ``block`` as for :meth:`add_entry`."""
        return self._authorized(ledger_id, password, block=block).info()

    def list_ledgers(self, *, state: LedgerState | None = None, after: int | None = None,
                     limit: int = 100) -> tuple[list[LedgerInfo], int | None]:
        if limit <= 0:
            raise BadRequest("limit must be positive")
        with self._lock:
            ids = sorted(i for i, led in self._ledgers.items()
                         if (after is None or i > after) and (state is None or led.state == state))
            page = [self._ledgers[i].info() for i in ids[:limit]]
        next_after = page[-1].ledger_id if len(ids) > limit else None
        return page, next_after

    def fence(self, ledger_id: int, *, password: str) -> Future[LedgerInfo]:
        ledger = self._authorized(ledger_id, password)

        def attempt() -> JournalAppend:
            with self._lock:
                self._check_live(ledger)
                append = self._journal_append(events.encode_fence(ledger_id))
                if ledger.state == LedgerState.OPEN:
                    ledger.state = LedgerState.FENCED
                self._dirty.add(ledger_id)
                return append

        return self._after_sync(self._retrying(attempt), ledger.info)

    def close_ledger(self, ledger_id: int, *, password: str) -> Future[LedgerInfo]:
        ledger = self._authorized(ledger_id, password)
        now = time.time()

        def attempt() -> JournalAppend | None:
            with self._lock:
                self._check_live(ledger)
                if ledger.state == LedgerState.CLOSED:
                    return None  # closing is idempotent; the CLOSE is already durable
                append = self._journal_append(events.encode_close(ledger_id, now))
                ledger.state = LedgerState.CLOSED
                ledger.closed_at = now
                self._dirty.add(ledger_id)
                return append

        append = self._retrying(attempt)
        if append is None:
            done: Future[LedgerInfo] = Future()
            done.set_result(ledger.info())
            return done
        # The CLOSE record follows every add of the ledger in the journal, so
        # once it is synced all of them are acknowledged and the LAC is final.
        return self._after_sync(append, ledger.info)

    def delete_ledger(self, ledger_id: int, *, password: str) -> Future[None]:
        ledger = self._authorized(ledger_id, password)

        def attempt() -> JournalAppend:
            with self._lock:
                self._check_live(ledger)
                append = self._journal_append(events.encode_delete(ledger_id))
                self.apply_delete(ledger_id)
                return append

        append = self._retrying(attempt)
        self._verifier.forget(ledger_id)
        return self._after_sync(append, lambda: None)

    # --- entries ---------------------------------------------------------

    def add_entry(self, ledger_id: int, payload: bytes, *, password: str,
                  expected_entry_id: int | None = None, block: bool = True) -> Future[AddResult]:
        """Append one entry; the future resolves once it is durable.

        With ``block=True`` it may wait: up to ``write_cache.wait_s_max`` under
        back-pressure, for scrypt on a password not yet verified, for a disk read
        on an idempotent retry; call it off the event loop.  With ``block=False``
        any of those raises :class:`WouldBlock` instead, having changed nothing,
        so the common case can run on the event loop itself."""
        self._check_entry_size(len(payload))
        ledger = self._authorized(ledger_id, password, block=block)
        crc = crc32c.crc32c(payload)
        if expected_entry_id is not None and expected_entry_id < ledger.next_entry_id:
            if not block:
                raise WouldBlock("an idempotent retry reads the stored entry back")
            return self._idempotent_retry(ledger, expected_entry_id, payload, crc)
        append, first = self._append(ledger, [(payload, crc)], expected_entry_id, block=block)
        return self._after_sync(append, lambda: AddResult(
            entry_id=first, last_add_confirmed=ledger.last_add_confirmed, crc32c=crc))

    def add_entries(self, ledger_id: int, payloads: Sequence[bytes], *, password: str,
                    expected_first_entry_id: int | None = None,
                    block: bool = True) -> Future[BatchAddResult]:
        """Append a batch as one journal record: all of it is acknowledged or none.
        ``expected_first_entry_id`` makes it idempotent like ``expected_entry_id``
        of :meth:`add_entry`: the whole batch already stored from there resolves
        with ``already_present``; any other id than the next one is EntryConflict.
        ``block`` as for :meth:`add_entry`."""
        if not payloads:
            raise BadRequest("a batch needs at least one entry")
        for payload in payloads:
            self._check_entry_size(len(payload))
        # Count the per-entry framing too: the whole batch is one journal record.
        total = sum(len(p) for p in payloads) + events.ADD_ITEM_OVERHEAD_BYTES * len(payloads)
        if total > self.settings.batch_size_bytes_max:
            raise EntryTooLarge(f"batch of {total} bytes exceeds the limit of "
                                f"{self.settings.batch_size_bytes_max} bytes")
        ledger = self._authorized(ledger_id, password, block=block)
        entries = [(p, crc32c.crc32c(p)) for p in payloads]
        expected = expected_first_entry_id
        if expected is not None and expected < ledger.next_entry_id:
            if not block:
                raise WouldBlock("an idempotent retry reads the stored entries back")
            return self._idempotent_batch_retry(ledger, expected, entries)
        append, first = self._append(ledger, entries, expected, block=block)
        last = first + len(entries) - 1
        return self._after_sync(append, lambda: BatchAddResult(
            first_entry_id=first, last_entry_id=last,
            last_add_confirmed=ledger.last_add_confirmed))

    def read_entry(self, ledger_id: int, entry_id: int) -> Entry:
        ledger = self._ledger(ledger_id)
        if entry_id < 0 or entry_id > ledger.last_add_confirmed:
            raise NoSuchEntry(ledger_id, entry_id)
        offload = ledger.offload
        if offload.local_deleted:
            payload, crc = self._read_remote(ledger_id, entry_id, offload)
        else:
            payload, crc = self.storage.get(ledger_id, entry_id)
        if crc32c.crc32c(payload) != crc:
            raise CorruptRecord(f"ledger {ledger_id}", entry_id,
                                "payload does not match its CRC32C")
        with self._read_count_lock:  # reads run on many threads; `+=` is not atomic
            self._counters["reads"] += 1
        return Entry(ledger_id=ledger_id, entry_id=entry_id, payload=payload, crc32c=crc)

    def read_entries(self, ledger_id: int, start: int = 0, end: int | None = None,
                     limit: int | None = None) -> Iterator[Entry]:
        """Entries ``start..end`` (inclusive, ``end`` defaults to and is capped at
        the LAC seen when called), read lazily one at a time."""
        lac = self._ledger(ledger_id).last_add_confirmed
        if start < 0:
            raise BadRequest("start must not be negative")
        last = lac if end is None else min(end, lac)
        if limit is not None:
            last = min(last, start + limit - 1)
        return (self.read_entry(ledger_id, eid) for eid in range(start, last + 1))

    def _read_remote(self, ledger_id: int, entry_id: int,
                     offload: OffloadInfo) -> tuple[bytes, int]:
        remote = self._remote
        if remote is None:
            raise StorageUnavailable(f"ledger {ledger_id} is offloaded and its local copy "
                                     "deleted, but no S3 reader is configured")
        return remote.read_entry(ledger_id, entry_id, offload)

    # --- offload and compaction seams --------------------------------------

    @property
    def next_ledger_id(self) -> int:
        """Ids below this that ``list_ledgers`` does not show were deleted (never reused)."""
        return self._next_ledger_id

    def attach_remote_reader(self, reader: RemoteEntryReader | None) -> None:
        self._remote = reader

    def set_offload(self, ledger_id: int, info: OffloadInfo) -> LedgerInfo:
        """Record a ledger's offload state; durable (checkpointed) on return."""
        with self._lock:
            ledger = self._ledger(ledger_id)
            self._check_live(ledger)
            if ledger.offload.local_deleted and not info.local_deleted:
                raise BadRequest(f"ledger {ledger_id}: its local copy is already deleted")
            ledger.offload = info
            self._dirty.add(ledger_id)
        # A full checkpoint rather than a lone record write: the record must never
        # claim entries that are not yet in the index (replay would skip them).
        self.checkpoint()
        return ledger.info()

    def drop_local_copy(self, ledger_id: int) -> bool:
        """Make an offloaded ledger's local entries garbage; reads go to S3 after.

        Returns False when the ledger is not offloaded (or already dropped)."""
        ledger = self._ledger(ledger_id)
        if ledger.state != LedgerState.CLOSED or ledger.offload.state != OffloadState.OFFLOADED:
            return False
        if self._remote is None or ledger.offload.local_deleted:
            return False
        self.checkpoint()  # every entry of the (closed) ledger is now in the index
        with self._checkpoint_lock:
            with self._lock:
                ledger.offload = replace(ledger.offload, local_deleted=True)
                record = ledger.snapshot_record()
            batch = self.storage.index.batch()
            batch.put_ledger(record)
            batch.delete_locations(ledger_id)
            self.storage.index.commit(batch)
            self.storage.read_cache.drop_ledger(ledger_id)
        log.info("local copy dropped ledger_id=%d", ledger_id, extra={"ledger_id": ledger_id})
        return True

    def locally_live_ledgers(self) -> set[int]:
        """Ledgers whose entries in the entry logs are still needed: besides the
        live ones, those deleted since the last checkpoint, because until the
        checkpoint commits, a crash could still bring them back from the index
        (if their DELETE record never reached the journal's disk)."""
        with self._lock:
            live = {i for i, led in self._ledgers.items() if not led.offload.local_deleted}
            return live | self._deleted

    def location_of(self, ledger_id: int, entry_id: int) -> Location | None:
        try:
            return Location(*self.storage.index.location(ledger_id, entry_id))
        except NoSuchEntry:
            return None

    def set_relocating_from(self, log_id: int) -> None:
        """Persist (synced) the log compaction is about to copy into; cleared by
        :meth:`commit_relocations`.  Found set at open, it means a crash left
        copies nothing points at in that log or a later one."""
        batch = self.storage.index.batch()
        batch.set_relocating_from(log_id)
        self.storage.index.commit(batch)

    def suspect_logs(self) -> list[int]:
        """Entry logs that may hold unindexed compaction copies, so their ledgers
        maps overstate their live data; GC compacts them whatever their usage."""
        return self.storage.index.suspect_logs()

    def clear_suspect_log(self, log_id: int) -> None:
        with self._checkpoint_lock:
            batch = self.storage.index.batch()
            batch.set_suspect_logs([i for i in self.suspect_logs() if i != log_id])
            self.storage.index.commit(batch)

    def _adopt_interrupted_relocation(self) -> None:
        """Turn a ``relocating_from`` mark left by a crash into the list of logs
        that existed at open from that id on: logs created later cannot hold
        the lost copies, so the list is bounded."""
        index = self.storage.index
        start = index.relocating_from()
        if start is None:
            return
        suspects = set(index.suspect_logs())
        suspects.update(i for i in self.storage.entry_log.flushed_log_ids() if i >= start)
        batch = index.batch()
        batch.set_suspect_logs(sorted(suspects))
        batch.set_relocating_from(None)
        index.commit(batch)
        log.warning("interrupted compaction: entry logs %s may hold unindexed copies",
                    sorted(suspects), extra={"suspect_logs": sorted(suspects)})

    def commit_relocations(self, moves: Sequence[Relocation]) -> int:
        """Point the index at compacted copies (already fsynced by the caller)
        and clear the ``relocating_from`` mark in the same batch.

        Under the checkpoint lock, so a ledger deleted meanwhile (whose locations
        a checkpoint removes with ``delete_range``) is never given new ones."""
        with self._checkpoint_lock:
            live = self.locally_live_ledgers()
            batch = self.storage.index.batch()
            for move in moves:
                if move.ledger_id in live:
                    batch.put_location(move.ledger_id, move.entry_id, *move.new)
            batch.set_relocating_from(None)
            self.storage.index.commit(batch)
        return batch.location_count

    # --- operations ------------------------------------------------------

    @property
    def read_only(self) -> bool:
        return self._read_only

    def set_read_only(self, read_only: bool) -> None:
        if self._read_only != read_only:
            log.warning("bookie read_only=%s", read_only)
        self._read_only = read_only

    @property
    def broken(self) -> BaseException | None:
        return self._broken

    def checkpoint(self) -> None:
        """Make everything in the write cache durable in the entry log and index,
        then trim the journal up to the position noted at the swap."""
        with self._checkpoint_lock:
            if self._broken is not None:
                raise DeviceBroken(f"bookie is broken: {self._broken}")
            snap = self._freeze()
            self.journal.wait_synced(snap.mark)
            self._flush(snap)
            self.journal.trim(snap.mark)

    def flush_for_replay(self, mark: int) -> None:
        """During replay (journal not started): persist what was replayed so far."""
        with self._checkpoint_lock:
            self._flush(self._freeze(mark))

    def _freeze(self, mark: int | None = None) -> _Snapshot:
        with self._lock:
            snap = _Snapshot(
                mark=self.journal.appended_offset if mark is None else mark,
                frozen=self.storage.write_cache.swap(),
                live={i for i, led in self._ledgers.items() if not led.offload.local_deleted},
                records=[self._ledgers[i].snapshot_record() for i in self._dirty
                         if i in self._ledgers],
                deleted=self._deleted,
                next_ledger_id=self._next_ledger_id,
            )
            self._dirty = set()
            self._deleted = set()
        with self.storage.write_cache.space:
            self.storage.write_cache.space.notify_all()
        return snap

    def _flush(self, snap: _Snapshot) -> None:
        try:
            result = self.storage.flush(
                snap.frozen, live=snap.live, records=snap.records, deleted=snap.deleted,
                journal_mark=snap.mark, next_ledger_id=snap.next_ledger_id)
        finally:
            self.storage.write_cache.release_frozen()
        self._index_mark = snap.mark
        self._counters["checkpoints"] += 1
        self._last_checkpoint = (result.duration_s, result.entry_count)
        log.debug("checkpoint mark=%d entries=%d bytes=%d duration_s=%.4f", snap.mark,
                  result.entry_count, result.byte_count, result.duration_s)

    def last_log_mark(self) -> dict[str, int]:
        j = self.journal
        return {"checkpoint_offset": self._index_mark, "trim_offset": j.trim_offset,
                "synced_offset": j.synced_offset, "appended_offset": j.appended_offset}

    def statistics(self) -> BookieStatistics:
        wc = self.storage.write_cache.statistics()
        rc = self.storage.read_cache.statistics()
        js = self.journal.statistics()
        return BookieStatistics(
            ledger_count=len(self._ledgers), adds_total=self._counters["adds"],
            add_bytes_total=self._counters["add_bytes"], reads_total=self._counters["reads"],
            checkpoints_total=self._counters["checkpoints"],
            last_checkpoint_duration_s=self._last_checkpoint[0],
            last_checkpoint_entries=self._last_checkpoint[1],
            write_cache_active_bytes=wc.active_bytes, write_cache_frozen_bytes=wc.frozen_bytes,
            write_cache_capacity_bytes=wc.capacity_bytes, read_cache_bytes=rc.size_bytes,
            read_cache_hits=rc.hits, read_cache_misses=rc.misses,
            journal_appended_offset=js.appended_offset, journal_synced_offset=js.synced_offset,
            journal_trim_offset=js.trim_offset, journal_used_bytes=js.used_bytes,
            journal_capacity_bytes=js.capacity_bytes, read_only=self._read_only,
        )

    def disk_files(self) -> list[dict[str, Any]]:
        root = self.settings.data_dir
        files = []
        for dirpath, _dirs, names in os.walk(root):
            for name in sorted(names):
                path = Path(dirpath) / name
                files.append({"path": str(path.relative_to(root)),
                              "size": path.stat().st_size})
        return files

    # --- replay hooks (called by _replay, journal not yet started) ---------

    def apply_create(self, event: events.CreateEvent) -> None:
        if event.ledger_id in self._ledgers or event.ledger_id < self._next_ledger_id:
            return  # already persisted (or created and deleted before the mark)
        self._ledgers[event.ledger_id] = LiveLedger(
            ledger_id=event.ledger_id, state=LedgerState.OPEN, password=event.password,
            created_at=event.created_at, closed_at=None, metadata=dict(event.metadata))
        self._next_ledger_id = event.ledger_id + 1
        self._dirty.add(event.ledger_id)

    def apply_add(self, event: events.AddEvent, record_offset: int) -> str:
        """Replay one ADD; returns "applied", "duplicate" or "dropped"."""
        ledger = self._ledgers.get(event.ledger_id)
        if ledger is None:
            return "dropped"
        count = len(event.entries)
        if event.first_entry_id + count <= ledger.next_entry_id:
            return "duplicate"
        if event.first_entry_id != ledger.next_entry_id:
            # A hole swallowed earlier entries of this ledger; they were never
            # acknowledged, and keeping later ones would break dense ids.
            return "dropped"
        nbytes = sum(len(p) for p, _ in event.entries)
        if not self.storage.write_cache.fits(nbytes):
            self.flush_for_replay(record_offset)
        for i, (payload, crc) in enumerate(event.entries):
            self.storage.write_cache.put(ledger.ledger_id, event.first_entry_id + i, payload, crc)
        ledger.next_entry_id += count
        ledger.last_add_confirmed = ledger.next_entry_id - 1
        ledger.assigned_length += nbytes
        ledger.length = ledger.assigned_length
        self._dirty.add(ledger.ledger_id)
        return "applied"

    def apply_fence(self, ledger_id: int) -> None:
        ledger = self._ledgers.get(ledger_id)
        if ledger is not None and ledger.state == LedgerState.OPEN:
            ledger.state = LedgerState.FENCED
            self._dirty.add(ledger_id)

    def apply_close(self, ledger_id: int, closed_at: float) -> None:
        ledger = self._ledgers.get(ledger_id)
        if ledger is not None and ledger.state != LedgerState.CLOSED:
            ledger.state = LedgerState.CLOSED
            ledger.closed_at = closed_at
            self._dirty.add(ledger_id)

    def apply_delete(self, ledger_id: int) -> None:
        ledger = self._ledgers.pop(ledger_id, None)
        if ledger is not None:
            ledger.deleted = True
        self._dirty.discard(ledger_id)
        self._deleted.add(ledger_id)

    # --- internals -------------------------------------------------------

    def _append(self, ledger: LiveLedger, entries: list[tuple[bytes, int]],
                expected_entry_id: int | None, *, block: bool) -> tuple[JournalAppend, int]:
        nbytes = sum(len(p) for p, _ in entries)
        body = bytearray(events.encode_add(ledger.ledger_id, 0, entries))
        cache = self.storage.write_cache

        def attempt() -> tuple[JournalAppend, int]:
            with self._lock:
                self._check_appendable(ledger)
                first = ledger.next_entry_id
                if expected_entry_id is not None and expected_entry_id != first:
                    raise EntryConflict(f"entry {expected_entry_id} is not the next entry "
                                        f"of ledger {ledger.ledger_id} (next is {first})")
                if not cache.fits(nbytes):
                    raise _NeedSpace(WriteCacheFull("both write caches are full"),
                                     lambda t: self._wait_cache_space(nbytes, t))
                events.set_first_entry_id(body, first)
                append = self._journal_append(bytes(body))
                for i, (payload, crc) in enumerate(entries):
                    cache.put(ledger.ledger_id, first + i, payload, crc)
                ledger.next_entry_id = first + len(entries)
                ledger.assigned_length += nbytes
                self._dirty.add(ledger.ledger_id)
                self._counters["adds"] += len(entries)
                self._counters["add_bytes"] += nbytes
                if cache.is_full():
                    self._flusher.request()
                return append, first

        append, first = self._retrying(attempt, block=block)
        last = first + len(entries) - 1
        append.future.add_done_callback(lambda f: self._acknowledge(ledger, f, last, nbytes))
        return append, first

    def _acknowledge(self, ledger: LiveLedger, synced: Future[int], last: int,
                     nbytes: int) -> None:
        if synced.exception() is not None:
            self._mark_broken(synced.exception())  # type: ignore[arg-type]
            return
        # The journal resolves in offset order and ids are assigned in offset
        # order, so this add follows every earlier add of the ledger.
        with self._lock:
            if last > ledger.last_add_confirmed:
                ledger.last_add_confirmed = last
                ledger.length += nbytes

    def _idempotent_retry(self, ledger: LiveLedger, entry_id: int, payload: bytes,
                          crc: int) -> Future[AddResult]:
        if ledger.last_add_confirmed < entry_id:
            # Still in flight: everything appended so far is synced after this.
            self.journal.wait_synced(self.journal.appended_offset)
        try:
            stored, stored_crc = self.storage.get(ledger.ledger_id, entry_id)
        except NoSuchEntry as exc:
            raise EntryConflict(f"entry {entry_id} of ledger {ledger.ledger_id} was not "
                                "acknowledged") from exc
        if stored_crc != crc or stored != payload:
            raise EntryConflict(f"entry {entry_id} of ledger {ledger.ledger_id} holds "
                                "a different payload")
        done: Future[AddResult] = Future()
        done.set_result(AddResult(entry_id=entry_id, crc32c=crc, already_present=True,
                                  last_add_confirmed=ledger.last_add_confirmed))
        return done

    def _idempotent_batch_retry(self, ledger: LiveLedger, first: int,
                                entries: list[tuple[bytes, int]]) -> Future[BatchAddResult]:
        last = first + len(entries) - 1
        if last >= ledger.next_entry_id:
            raise EntryConflict(f"entries {first}..{last} of ledger {ledger.ledger_id} are "
                                f"not all stored (next is {ledger.next_entry_id})")
        for offset, (payload, crc) in enumerate(entries):
            self._idempotent_retry(ledger, first + offset, payload, crc)
        done: Future[BatchAddResult] = Future()
        done.set_result(BatchAddResult(first_entry_id=first, last_entry_id=last,
                                       last_add_confirmed=ledger.last_add_confirmed,
                                       already_present=True))
        return done

    def _journal_append(self, body: bytes) -> JournalAppend:
        """Append under the add lock; no room becomes a wait outside the lock."""
        try:
            return self.journal.append_nowait(body)
        except JournalFull as exc:
            need = len(body) + _RECORD_SLACK_BYTES
            raise _NeedSpace(exc, lambda t: self.journal.wait_for_space(need, t)) from exc

    def _retrying(self, attempt: Callable[[], T], *, block: bool = True) -> T:
        """``attempt()``, waiting for room and trying again while it finds none
        (each attempt changes nothing until it has room)."""
        deadline = time.monotonic() + self.settings.write_cache.wait_s_max
        while True:
            try:
                return attempt()
            except _NeedSpace as need:
                self._flusher.request()
                if not block:
                    raise WouldBlock(str(need.error)) from None
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not need.wait(remaining):
                    raise need.error from None

    def _wait_cache_space(self, nbytes: int, timeout_s: float) -> bool:
        cache = self.storage.write_cache
        with cache.space:
            return cache.space.wait_for(lambda: cache.fits(nbytes), timeout_s)

    def _after_sync(self, append: JournalAppend, result: Callable[[], T]) -> Future[T]:
        """A future resolved with ``result()`` once the journal synced ``append``.

        Registered after any ack callback of the same record, so the LAC the
        result reports already includes it."""
        done: Future[T] = Future()

        def resolve(synced: Future[int]) -> None:
            exc = synced.exception()
            if exc is not None:
                done.set_exception(exc)
            else:
                done.set_result(result())

        append.future.add_done_callback(resolve)
        return done

    def _ledger(self, ledger_id: int) -> LiveLedger:
        if not 0 <= ledger_id <= MAX_ID:
            raise NoSuchLedger(ledger_id)
        ledger = self._ledgers.get(ledger_id)
        if ledger is None:
            raise NoSuchLedger(ledger_id)
        return ledger

    def _authorized(self, ledger_id: int, password: str, *, block: bool = True) -> LiveLedger:
        ledger = self._ledger(ledger_id)
        if self._verifier.verify_cached(ledger_id, password):
            return ledger
        if not block:
            raise WouldBlock(f"ledger {ledger_id}: the password needs a full (scrypt) check")
        if not self._verifier.verify(ledger_id, ledger.password, password):
            raise Unauthorized(f"wrong password for ledger {ledger_id}")
        return ledger

    def _check_entry_size(self, size: int) -> None:
        if size > self.settings.entry_size_bytes_max:
            raise EntryTooLarge(f"entry of {size} bytes exceeds max_entry_size "
                                f"({self.settings.entry_size_bytes_max} bytes)")

    def _check_writable(self) -> None:
        if self._broken is not None:
            raise DeviceBroken(f"bookie is broken: {self._broken}")
        if self._closed:
            raise DeviceBroken("bookie is shut down")
        if self._read_only:
            raise ReadOnly("bookie is read-only")

    def _check_live(self, ledger: LiveLedger) -> None:
        if self._broken is not None:
            raise DeviceBroken(f"bookie is broken: {self._broken}")
        if ledger.deleted:
            raise NoSuchLedger(ledger.ledger_id)

    def _check_appendable(self, ledger: LiveLedger) -> None:
        self._check_writable()
        self._check_live(ledger)
        if ledger.state == LedgerState.FENCED:
            raise LedgerFenced(f"ledger {ledger.ledger_id} is fenced")
        if ledger.state == LedgerState.CLOSED:
            raise LedgerClosed(f"ledger {ledger.ledger_id} is closed")

    def _mark_broken(self, exc: BaseException) -> None:
        if self._broken is None:
            log.error("bookie broken, refusing writes: %r", exc)
            self._broken = exc
