"""The engine facade: ledgers and entries on top of the journal and storage.

Add path: limits and password (outside any lock) → one CRC32C per payload → the
appender, under the add lock, gives ids, stages the entries in the write cache
and queues one journal record → the journal's acker moves the LAC once the
record is durable, then the caller's :class:`Pending` resolves.

The ledger table holds every ledger's state; the checkpointer persists it with
the entries (``_checkpoint.py`` names its steps); replay rebuilds what the last
checkpoint missed through the same table and appender code.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace

import crc32c

from common.errors import (
    BadRequest,
    DeviceBroken,
    DiskFull,
    EntryConflict,
    LedgerdError,
    NoSuchEntry,
    NoSuchLedger,
    ReadOnly,
    StorageUnavailable,
    Unauthorized,
    WouldBlock,
)
from common.files import make_directory
from entrylog import EntryLogStore
from journal import Journal

from . import _events as events
from ._appender import Appender, BatchParts, WriteGate
from ._checkpoint import Checkpointer, CheckpointHook, CheckpointResult
from ._flusher import Flusher
from ._index import LocationIndex
from ._model import (
    AddResult,
    BatchAddResult,
    Entry,
    LedgerInfo,
    LedgerState,
    OffloadInfo,
    OffloadState,
    Pending,
    ReadHook,
    RemoteEntryReader,
    TierPosition,
)
from ._password import PasswordHash, PasswordVerifier
from ._relocations import Relocations
from ._replay import Replayer, ReplayReport
from ._replicas import Replicas
from ._settings import EngineSettings
from ._statistics import BookieStatistics, gather_statistics
from ._storage import EntryStorage
from ._table import LedgerTable, LiveLedger
from ._write_cache import WriteCache

log = logging.getLogger(__name__)


class Bookie:
    """Create/add/read/fence/close/delete ledgers; thread-safe; usable without HTTP."""

    def __init__(self, settings: EngineSettings, *, journal: Journal, index: LocationIndex,
                 entry_log: EntryLogStore, remote: RemoteEntryReader | None = None,
                 checkpoint_hook: CheckpointHook | None = None,
                 read_hook: ReadHook | None = None) -> None:
        self.settings = settings
        self.journal = journal
        self._limits = settings.limits
        cache = WriteCache(settings.write_cache.size_bytes)
        self.storage = EntryStorage(index=index, entry_log=entry_log, write_cache=cache,
                                    read_cache_settings=settings.read_cache)
        mark, next_ledger_id = index.checkpoint()
        self._table = LedgerTable(index.ledgers(), next_ledger_id=next_ledger_id,
                                  ledger_count_max=self._limits.ledger_count_max,
                                  replicas=index.replicas())
        self._verifier = PasswordVerifier()
        self._remote = remote
        self._read_hook = read_hook
        self._read_only = False
        self._broken: BaseException | None = None
        self._closed = False
        self._reads = 0
        self._reads_lock = threading.Lock()  # reads run on many threads
        self._disk_full = False
        self._flusher = Flusher(self._checkpoint_in_background,
                                interval_s=settings.write_cache.flush_interval_s,
                                on_failure=self._mark_broken)
        self._gate = WriteGate()
        self._appender = Appender(table=self._table, journal=journal, cache=cache,
                                  wait_s_max=settings.write_cache.wait_s_max,
                                  request_flush=self._flusher.request, gate=self._gate)
        self._checkpointer = Checkpointer(appender=self._appender, table=self._table,
                                          journal=journal, storage=self.storage,
                                          step_hook=checkpoint_hook)
        self._checkpointer.mark = mark
        self.relocations = Relocations(index=index, entry_log=entry_log,
                                       checkpoint_lock=self._checkpointer.lock,
                                       locally_stored=self._table.locally_stored,
                                       partially_local=self._table.partially_local,
                                       unindexed_from=lambda: self._checkpointer.unindexed_from)
        # Cluster mode: this engine as a bookie holding other writers' replicas.
        self.replicas = Replicas(table=self._table, appender=self._appender,
                                 storage=self.storage, limits=self._limits,
                                 check_not_broken=self._check_not_broken)
        self.replay_report: ReplayReport | None = None

    # --- lifecycle -------------------------------------------------------

    @classmethod
    def open(cls, settings: EngineSettings, *, remote: RemoteEntryReader | None = None,
             checkpoint_hook: CheckpointHook | None = None,
             read_hook: ReadHook | None = None) -> Bookie:
        """Open (or create) the stores, replay the journal, start background threads."""
        settings.check()
        try:
            make_directory(settings.data_dir)
        except OSError as exc:
            raise DeviceBroken(f"cannot create the data directory: {exc}") from exc
        index = LocationIndex(settings.index_path)
        try:
            entry_log = EntryLogStore(settings.entry_log)
            journal = Journal.open(settings.journal)
        except BaseException:
            index.close()
            raise
        bookie = cls(settings, journal=journal, index=index, entry_log=entry_log,
                     remote=remote, checkpoint_hook=checkpoint_hook, read_hook=read_hook)
        bookie._recover()
        return bookie

    def _recover(self) -> None:
        self.relocations.adopt_interrupted()
        replayer = Replayer(table=self._table, appender=self._appender,
                            cache=self.storage.write_cache, replicas=self.replicas.apply,
                            flush=lambda mark: self._checkpointer.run(mark=mark, replaying=True))
        self.replay_report = replayer.replay(self.journal.replay(), self._checkpointer.mark)
        self.journal.start()
        self._flusher.start()
        # Persist what replay rebuilt so the journal can be trimmed past any hole
        # (on a full disk the bookie opens read-only and keeps trying).
        self._checkpoint_in_background()
        log.info("bookie ready ledgers=%d replay=%s", len(self._table), self.replay_report)

    def close(self) -> None:
        """Clean shutdown: stop the flusher, checkpoint everything, close the stores."""
        if self._closed:
            return
        self._closed = True
        self._update_gate()
        self._flusher.stop()
        try:
            if self._broken is None:
                self._checkpoint_in_background()  # on a full disk the journal keeps it
        finally:
            self.journal.close()
            self.storage.close()

    # --- ledgers ---------------------------------------------------------

    def create_ledger(self, *, password: str, metadata: Mapping[str, str]) -> Pending[LedgerInfo]:
        self._limits.check_create(password, metadata)
        self._check_writable()
        hashed = PasswordHash.create(password)
        now = time.time()

        def decide() -> events.CreateEvent:
            self._table.check_room()
            return events.CreateEvent(self._table.next_ledger_id, now, hashed, dict(metadata))

        append, ledger = self._appender.commit_event(decide, writable=True)
        assert append is not None and ledger is not None
        self._verifier.remember(ledger.ledger_id, password)
        return Pending(append.future, ledger.info)

    def get_ledger(self, ledger_id: int) -> LedgerInfo:
        return self._table.get(ledger_id).info()

    def authorize(self, ledger_id: int, *, password: str, block: bool = True) -> LedgerInfo:
        """The ledger, once ``password`` is known to be its password: NoSuchLedger,
        Unauthorized.  For callers that check once and then add many times (append
        streams check at the upgrade).  ``block`` as for :meth:`add_entry`."""
        return self._authorized(ledger_id, password, block=block).info()

    def password_verified(self, ledger_id: int, password: str) -> bool:
        """Whether ``password`` is the ledger's password as verified before (no
        scrypt, never waits: the cheap test an add makes); False means only
        :meth:`authorize` can tell.  NoSuchLedger for an unknown ledger."""
        self._table.get(ledger_id)
        return self._verifier.verify_cached(ledger_id, password)

    def list_ledgers(self, *, state: LedgerState | None = None, after: int | None = None,
                     limit: int = 100) -> tuple[list[LedgerInfo], int | None]:
        if limit <= 0:
            raise BadRequest("limit must be positive")
        return self._table.page(state=state, after=after, limit=limit)

    def fence(self, ledger_id: int, *, password: str) -> Pending[LedgerInfo]:
        return self._metadata_event(ledger_id, password, events.FenceEvent(ledger_id))

    def close_ledger(self, ledger_id: int, *, password: str) -> Pending[LedgerInfo]:
        # The CLOSE record follows every add of the ledger in the journal, so once
        # it is synced all of them are acknowledged and the LAC is final.
        return self._metadata_event(ledger_id, password,
                                    events.CloseEvent(ledger_id, time.time()))

    def delete_ledger(self, ledger_id: int, *, password: str) -> Pending[None]:
        pending = self._metadata_event(ledger_id, password, events.DeleteEvent(ledger_id))
        self._verifier.forget(ledger_id)
        return Pending(pending.future, lambda: None)

    def _metadata_event(self, ledger_id: int, password: str,
                        event: events.FenceEvent | events.CloseEvent | events.DeleteEvent,
                        ) -> Pending[LedgerInfo]:
        ledger = self._authorized(ledger_id, password)

        def decide() -> events.MetadataEvent | None:
            self._check_not_broken()
            self._table.get(ledger_id)  # deleted meanwhile: NoSuchLedger
            if isinstance(event, events.CloseEvent) and ledger.state == LedgerState.CLOSED:
                return None  # closing is idempotent; the CLOSE is already durable
            return event

        append, _ = self._appender.commit_event(decide, writable=False)
        return Pending.ready(ledger.info()) if append is None else \
            Pending(append.future, ledger.info)

    # --- entries ---------------------------------------------------------

    def add_entry(self, ledger_id: int, payload: bytes, *, password: str,
                  expected_entry_id: int | None = None,
                  block: bool = True) -> Pending[AddResult]:
        """Append one entry; the outcome is durable once ``result()`` returns.

        With ``block=True`` it may wait: up to ``write_cache.wait_s_max`` under
        back-pressure, for scrypt on a password not yet verified, for a disk read
        on an idempotent retry; call it off the event loop.  With ``block=False``
        any of those raises :class:`WouldBlock` instead, having changed nothing,
        so the common case can run on the event loop itself."""
        self._limits.check_entry(len(payload))
        ledger = self._authorized(ledger_id, password, block=block)
        crc = crc32c.crc32c(payload)
        if expected_entry_id is not None and expected_entry_id < ledger.next_entry_id:
            if not block:
                raise WouldBlock("an idempotent retry reads the stored entry back")
            lac = self._already_stored(ledger, expected_entry_id, (payload,))
            return Pending.ready(AddResult(entry_id=expected_entry_id, crc32c=crc,
                                           already_present=True, last_add_confirmed=lac))
        append, first = self._appender.append(ledger, (payload,), (crc,), len(payload),
                                              expected_entry_id, block=block)
        return Pending(append.future, lambda: AddResult(
            entry_id=first, last_add_confirmed=ledger.last_add_confirmed, crc32c=crc),
            append.end_offset)

    def add_entries(self, ledger_id: int, payloads: Sequence[bytes], *, password: str,
                    expected_first_entry_id: int | None = None,
                    block: bool = True) -> Pending[BatchAddResult]:
        """Append a batch as one journal record: all of it is acknowledged or none.
        ``expected_first_entry_id`` makes it idempotent as ``expected_entry_id``
        does for one entry (the whole batch already there from it: answered with
        ``already_present``; not the next id: EntryConflict); ``block`` as for
        :meth:`add_entry`."""
        self._limits.check_batch(payloads)
        ledger = self._authorized(ledger_id, password, block=block)
        expected = expected_first_entry_id
        if expected is not None and expected < ledger.next_entry_id:
            if not block:
                raise WouldBlock("an idempotent retry reads the stored entries back")
            lac = self._already_stored(ledger, expected, payloads)
            return Pending.ready(BatchAddResult(
                first_entry_id=expected, last_entry_id=expected + len(payloads) - 1,
                last_add_confirmed=lac, already_present=True))
        crcs = [crc32c.crc32c(p) for p in payloads]
        nbytes = sum(len(p) for p in payloads)
        append, first = self._appender.append(ledger, payloads, crcs, nbytes, expected,
                                              block=block)
        last = first + len(payloads) - 1
        return Pending(append.future, lambda: BatchAddResult(
            first_entry_id=first, last_entry_id=last,
            last_add_confirmed=ledger.last_add_confirmed), append.end_offset)

    def add_batches(self, ledger_id: int,
                    batches: Sequence[tuple[int | None, Sequence[bytes]]], *, password: str,
                    block: bool = True) -> list[Pending[BatchAddResult]]:
        """Append consecutive batches ``(expected_first_entry_id, payloads)`` to one
        ledger, each exactly as :meth:`add_entries` would (its own journal record,
        all or nothing), but under one add lock and with one journal future: for
        callers that have many batches ready at once (an append stream's queued
        messages).  Returns the Pendings of a prefix of ``batches``, at least the
        first (whose error is raised as :meth:`add_entries` raises it); the run
        ends before a batch that cannot join it (over the limits, an idempotent
        retry, a conflict, no room while the ones before it had some), which the
        caller submits again: it is then appended or raises.  The Pendings
        resolve together."""
        expected, payloads = batches[0]
        ledger = self._authorized(ledger_id, password, block=block)
        if len(batches) == 1 or (expected is not None and expected < ledger.next_entry_id):
            return [self.add_entries(ledger_id, payloads, password=password,
                                     expected_first_entry_id=expected, block=block)]
        run: list[BatchParts] = []
        for expected, payloads in batches:
            try:
                self._limits.check_batch(payloads)
            except LedgerdError:
                if not run:
                    raise
                break
            run.append((payloads, [crc32c.crc32c(p) for p in payloads],
                        sum(len(p) for p in payloads), expected))
        append, first = self._appender.append_many(ledger, run, block=block)
        pendings: list[Pending[BatchAddResult]] = []
        for payloads, _crcs, _size, _expected in run[:append.record_count]:
            last = first + len(payloads) - 1
            pendings.append(Pending(append.future, functools.partial(
                _batch_result, ledger, first, last), append.end_offset))
            first = last + 1
        return pendings

    def read_entry(self, ledger_id: int, entry_id: int) -> Entry:
        ledger = self._table.get(ledger_id)
        if entry_id < 0 or entry_id > ledger.last_add_confirmed:
            raise NoSuchEntry(ledger_id, entry_id)
        if self._is_remote(ledger, entry_id):
            payload, crc = self._read_remote(ledger, entry_id)
        else:
            if self._read_hook is not None:
                self._read_hook(ledger_id, entry_id)
            try:
                payload, crc = self.storage.get(ledger_id, entry_id)
            except NoSuchEntry:
                # GC dropped the local copy between the check above and the read
                # (it marks the ledger before it removes the locations): the
                # entry is acknowledged, so it is in S3 now.
                if not self._is_remote(ledger, entry_id):
                    raise
                payload, crc = self._read_remote(ledger, entry_id)
        with self._reads_lock:
            self._reads += 1
        return Entry(ledger_id=ledger_id, entry_id=entry_id, payload=payload, crc32c=crc)

    @staticmethod
    def _is_remote(ledger: LiveLedger, entry_id: int) -> bool:
        """Whether the entry's local copy was dropped (it is read from S3)."""
        return ledger.offload.local_deleted or entry_id < ledger.local_first_entry_id

    def _read_remote(self, ledger: LiveLedger, entry_id: int) -> tuple[bytes, int]:
        if self._remote is None:
            raise StorageUnavailable(f"ledger {ledger.ledger_id} is offloaded and its local "
                                     "copy deleted, but no S3 reader is configured")
        return self._remote.read_entry(ledger.ledger_id, entry_id, ledger.offload)

    def scan_entries(self, ledger_id: int, start: int = 0,
                     end: int | None = None) -> Iterator[Entry]:
        """Entries ``start..end`` (capped at the LAC seen when called) for bulk
        readers such as offload: CRC-verified like reads, read a window of
        records at a time, and neither served from nor put into the read
        cache, so a bulk read neither evicts hot entries nor pays for caching
        what it reads once.  Entries whose local copy is gone come from S3."""
        ledger = self._table.get(ledger_id)
        if start < 0:
            raise BadRequest("start must not be negative")
        last = ledger.last_add_confirmed if end is None else min(end, ledger.last_add_confirmed)
        return self._scan(ledger, start, last)

    def _scan(self, ledger: LiveLedger, start: int, last: int) -> Iterator[Entry]:
        ledger_id = ledger.ledger_id
        entry_id = start
        while entry_id <= last:
            if self._is_remote(ledger, entry_id):
                payload, crc = self._read_remote(ledger, entry_id)
                yield Entry(ledger_id=ledger_id, entry_id=entry_id, payload=payload, crc32c=crc)
                entry_id += 1
                continue
            try:
                for found_id, payload, crc in self.storage.scan(ledger_id, entry_id, last):
                    yield Entry(ledger_id=ledger_id, entry_id=found_id, payload=payload,
                                crc32c=crc)
                    entry_id = found_id + 1
            except NoSuchEntry:
                if not self._is_remote(ledger, entry_id):
                    raise

    def read_entries(self, ledger_id: int, start: int = 0, end: int | None = None,
                     limit: int | None = None) -> Iterator[Entry]:
        """Entries ``start..end`` (inclusive, ``end`` defaults to and is capped at
        the LAC seen when called), read lazily one at a time."""
        lac = self._table.get(ledger_id).last_add_confirmed
        if start < 0:
            raise BadRequest("start must not be negative")
        last = lac if end is None else min(end, lac)
        if limit is not None:
            last = min(last, start + limit - 1)
        return (self.read_entry(ledger_id, eid) for eid in range(start, last + 1))

    # --- offload seams -----------------------------------------------------

    @property
    def next_ledger_id(self) -> int:
        """Ids below this that ``list_ledgers`` does not show were deleted (never reused)."""
        return self._table.next_ledger_id

    def set_offload(self, ledger_id: int, info: OffloadInfo) -> LedgerInfo:
        """Record a ledger's offload state; durable (checkpointed) on return."""
        with self._appender.lock:
            self._check_not_broken()
            ledger = self._table.get(ledger_id)
            if ledger.offload.local_deleted and not info.local_deleted:
                raise BadRequest(f"ledger {ledger_id}: its local copy is already deleted")
            self._table.set_offload(ledger, info)
        # A full checkpoint rather than a lone record write: the record must never
        # claim entries that are not yet in the index (replay would skip them).
        self.checkpoint()
        return ledger.info()

    def record_tier_position(self, ledger_id: int, position: TierPosition) -> LedgerInfo:
        """Record how far the ledger is tiered to S3 (offload/, DESIGN §6); durable
        on return.  A TIER journal record, applied by the ledger table like any
        other event (live and in replay); positions only grow.  Allowed on a
        read-only bookie: tiering is what frees its disk."""
        self._table.get(ledger_id)

        def decide() -> events.TierEvent:
            self._check_not_broken()
            self._table.get(ledger_id)  # deleted meanwhile: NoSuchLedger
            return events.TierEvent(ledger_id, position)

        append, ledger = self._appender.commit_event(decide, writable=False)
        assert append is not None and ledger is not None
        append.future.result()
        return ledger.info()

    def drop_local_entries(self, below: Mapping[int, int]) -> list[int]:
        """Make each ledger's local entries below ``below[ledger_id]`` garbage:
        they must be tiered (the id is capped at the recorded tier position),
        and reads of them go to S3 from now on.  One checkpoint (run here)
        persists the new first local entries and removes the dropped
        locations in one index batch, so GC can reclaim the entry logs that
        held only them.  Returns the ledgers whose first local entry moved
        (none without an S3 reader)."""
        if self._remote is None:
            return []
        moved: list[int] = []
        with self._appender.lock:
            for ledger_id, first_local in sorted(below.items()):
                try:
                    ledger = self._table.get(ledger_id)
                except NoSuchLedger:
                    continue  # deleted meanwhile
                first_local = min(first_local, ledger.tier.entry_id)
                if ledger.offload.local_deleted or first_local <= ledger.local_first_entry_id:
                    continue
                self._table.drop_local_below(ledger, first_local)
                moved.append(ledger_id)
        if moved:
            self.checkpoint()
            log.info("tiered local entries dropped", extra={
                "ledger_ids": moved, "below": {i: below[i] for i in moved}})
        return moved

    def drop_local_copy(self, ledger_id: int) -> bool:
        """Make an offloaded ledger's local entries garbage; reads go to S3 after.

        Returns False when the ledger is not offloaded (or already dropped)."""
        ledger = self._table.get(ledger_id)
        if ledger.state != LedgerState.CLOSED or ledger.offload.state != OffloadState.OFFLOADED:
            return False
        if self._remote is None or ledger.offload.local_deleted:
            return False
        self.checkpoint()  # every entry of the (closed) ledger is now in the index
        with self._checkpointer.lock:
            with self._appender.lock:
                self._table.set_offload(ledger, replace(ledger.offload, local_deleted=True))
                record = ledger.snapshot_record()
            # The record and the end of its locations in one batch: the index
            # never says "local copy dropped" while still pointing at it.
            batch = self.storage.index.batch()
            batch.put_ledger(record)
            batch.delete_locations(ledger_id)
            self.storage.index.commit(batch)
            self.storage.read_cache.drop_ledger(ledger_id)
        log.info("local copy dropped ledger_id=%d", ledger_id, extra={"ledger_id": ledger_id})
        return True

    # --- operations ------------------------------------------------------

    @property
    def read_only(self) -> bool:
        return self._read_only

    def set_read_only(self, read_only: bool) -> None:
        if self._read_only != read_only:
            log.warning("bookie read_only=%s", read_only)
        self._read_only = read_only
        self._update_gate()

    @property
    def broken(self) -> BaseException | None:
        return self._broken

    def checkpoint(self) -> CheckpointResult:
        """Make everything in the write cache durable in the entry log and index,
        then trim the journal up to the position noted at the swap.  A full disk
        (``DiskFull``) turns the bookie read-only until a checkpoint succeeds
        again (GC and deletes free space; reads go on); any other failure latches
        it broken (writes refused, reads served)."""
        self._check_not_broken()
        try:
            result = self._checkpointer.run()
        except DiskFull:
            self._set_disk_full(True)
            raise
        except BaseException as exc:
            self._mark_broken(exc)
            raise
        self._set_disk_full(False)
        return result

    def commit_deletions(self) -> int:
        """Commit pending deletions on their own (see ``Checkpointer``): with a
        full disk, this is what lets GC reclaim the entry logs of deleted ledgers."""
        self._check_not_broken()
        return self._checkpointer.commit_deletions()

    def _checkpoint_in_background(self) -> None:
        """A checkpoint nobody waits for (the flusher, open, close): a full disk is
        logged and tried again later, anything else propagates."""
        try:
            self.checkpoint()
        except DiskFull as exc:
            log.warning("checkpoint deferred, the data disk is full: %s", exc)

    def _set_disk_full(self, full: bool) -> None:
        if self._disk_full != full:
            log.warning("data disk %s: adds %s", "full" if full else "has room again",
                        "refused (507)" if full else "accepted again")
            self._disk_full = full
            self._update_gate()

    @property
    def disk_full(self) -> bool:
        return self._disk_full

    def last_log_mark(self) -> dict[str, int]:
        j = self.journal
        return {"checkpoint_offset": self._checkpointer.mark, "trim_offset": j.trim_offset,
                "synced_offset": j.synced_offset, "appended_offset": j.appended_offset}

    def statistics(self) -> BookieStatistics:
        return gather_statistics(self.storage, self.journal, self._checkpointer.last,
                                 ledger_count=len(self._table), read_only=self._read_only,
                                 replica_count=len(self._table.replicas),
                                 adds=self._appender.add_count, add_bytes=self._appender.add_bytes,
                                 reads=self._reads, checkpoints=self._checkpointer.count)

    # --- internals -------------------------------------------------------

    def _already_stored(self, ledger: LiveLedger, first: int,
                        payloads: Sequence[bytes]) -> int:
        """An idempotent retry: every payload is stored from ``first`` on, byte for
        byte (EntryConflict otherwise); returns the LAC once they are durable."""
        last = first + len(payloads) - 1
        if last >= ledger.next_entry_id:
            raise EntryConflict(f"entries {first}..{last} of ledger {ledger.ledger_id} are "
                                f"not all there (the next entry is {ledger.next_entry_id})")
        if ledger.last_add_confirmed < last:
            # Still in flight: everything appended so far is synced after this.
            self.journal.wait_synced(self.journal.appended_offset)
        for entry_id, payload in enumerate(payloads, start=first):
            try:
                stored, _crc = self.storage.get(ledger.ledger_id, entry_id)
            except NoSuchEntry as exc:
                raise EntryConflict(f"entry {entry_id} of ledger {ledger.ledger_id} was not "
                                    "acknowledged") from exc
            if stored != payload:
                raise EntryConflict(f"entry {entry_id} of ledger {ledger.ledger_id} holds "
                                    "a different payload")
        return ledger.last_add_confirmed

    def _authorized(self, ledger_id: int, password: str, *, block: bool = True) -> LiveLedger:
        ledger = self._table.get(ledger_id)
        if self._verifier.verify_cached(ledger_id, password):
            return ledger
        if not block:
            raise WouldBlock(f"ledger {ledger_id}: the password needs a full (scrypt) check")
        if not self._verifier.verify(ledger_id, ledger.password, password):
            raise Unauthorized(f"wrong password for ledger {ledger_id}")
        return ledger

    def _check_not_broken(self) -> None:
        if self._broken is not None:
            raise DeviceBroken(f"bookie is broken: {self._broken}")
        if self.journal.broken:
            raise DeviceBroken(f"journal {self.journal.path} is broken")

    def _check_writable(self) -> None:
        self._check_not_broken()
        self._gate.check()

    def _update_gate(self) -> None:
        """Tell the add path (one attribute read per add) why writes are refused."""
        broken = self._broken
        if broken is not None:
            self._gate.refusal = lambda: DeviceBroken(f"bookie is broken: {broken}")
        elif self._closed:
            self._gate.refusal = lambda: DeviceBroken("bookie is shut down")
        elif self._disk_full:
            self._gate.refusal = lambda: DiskFull(
                "the data disk is full: adds are refused until garbage collection or "
                "deletes free space (reads go on)")
        elif self._read_only:
            self._gate.refusal = lambda: ReadOnly("bookie is read-only")
        else:
            self._gate.refusal = None

    def _mark_broken(self, exc: BaseException) -> None:
        if self._broken is None:
            log.error("bookie broken, refusing writes: %r", exc)
            self._broken = exc
            self._update_gate()


def _batch_result(ledger: LiveLedger, first: int, last: int) -> BatchAddResult:
    # Positional: built once per stream message.
    return BatchAddResult(first, last, ledger.last_add_confirmed)
