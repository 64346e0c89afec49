"""The engine facade: ledgers and entries on top of the journal and storage.

The facade wires the parts and owns the lifecycle (open, recover, close) and the
checkpoint's entry points; each public method delegates to one module.

Add path: ``_writes.py`` checks limits and password (outside any lock), computes
one CRC32C per payload and answers an idempotent retry from what is stored → the
appender, under the add lock, gives ids, stages the entries in the write cache
and queues one journal record → the journal's acker moves the LAC once the
record is durable, then the caller's :class:`Pending` resolves.  Creates,
fences, closes and deletes are checked in ``_writes.py`` too.

The ledger table holds every ledger's state; the checkpointer persists it with
the entries (``_checkpoint.py`` names its steps); replay rebuilds what the last
checkpoint missed through the same table and appender code.  Reads (local or
from S3) are ``_reader.py``'s, what offload and GC record about local copies is
``_local_copies.py``'s, and why writes are refused is ``_health.py``'s.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping, Sequence

from common.errors import BadRequest, DiskFull
from common.memory import release_free_heap
from entrylog import EntryLogStore
from journal import Journal

from . import _events as events
from ._appender import Appender
from ._checkpoint import Checkpointer, CheckpointHook, CheckpointResult
from ._flusher import Flusher
from ._health import Health
from ._index import LocationIndex
from ._local_copies import LocalCopies
from ._model import (
    Batch,
    BatchAddResult,
    Entry,
    LedgerFilter,
    LedgerInfo,
    LedgerState,
    OffloadInfo,
    Pending,
    ReadHook,
    RemoteEntryReader,
    TierPosition,
)
from ._node_key import refuse_lost_key
from ._password import PasswordVerifier
from ._reader import EntryReader
from ._relocations import Relocations
from ._replay import Replayer, ReplayReport
from ._replicas import Replicas
from ._settings import EngineSettings
from ._statistics import BookieStatistics, gather_statistics
from ._storage import EntryStorage
from ._stores import open_stores
from ._table import LedgerTable
from ._write_cache import WriteCache
from ._writes import Writes

log = logging.getLogger(__name__)


class Bookie:
    """Create/add/read/fence/close/delete ledgers; thread-safe; usable without HTTP."""

    def __init__(self, settings: EngineSettings, *, journal: Journal, index: LocationIndex,
                 entry_log: EntryLogStore, password_key: bytes,
                 remote: RemoteEntryReader | None = None,
                 checkpoint_hook: CheckpointHook | None = None,
                 read_hook: ReadHook | None = None) -> None:
        self.settings = settings
        self.journal = journal
        self._limits = settings.limits
        cache = WriteCache(settings.write_cache.size_bytes)
        self.storage = EntryStorage(index=index, entry_log=entry_log, write_cache=cache,
                                    read_cache_settings=settings.read_cache,
                                    sync_every_bytes=settings.write_cache.sync_every_bytes)
        mark, next_ledger_id = index.checkpoint()
        self._table = LedgerTable(index.raw_ledgers(), next_ledger_id=next_ledger_id,
                                  ledger_count_max=self._limits.ledger_count_max,
                                  replicas=index.replicas())
        self._health = Health(journal=journal)
        self._reader = EntryReader(table=self._table, storage=self.storage, journal=journal,
                                   remote=remote, read_hook=read_hook)
        self._flusher = Flusher(self._checkpoint_in_background,
                                interval_s=settings.write_cache.flush_interval_s,
                                on_failure=self._health.mark_broken)
        self._appender = Appender(table=self._table, journal=journal, cache=cache,
                                  wait_s_max=settings.write_cache.wait_s_max,
                                  request_flush=self._flusher.request, gate=self._health.gate,
                                  record_entries_max=settings.limits.batch_entry_count_max,
                                  record_bytes_max=settings.limits.batch_size_bytes_max)
        self._writes = Writes(table=self._table, appender=self._appender, reader=self._reader,
                              health=self._health, limits=self._limits,
                              passwords=PasswordVerifier(password_key))
        self._checkpointer = Checkpointer(appender=self._appender, table=self._table,
                                          journal=journal, storage=self.storage,
                                          step_hook=checkpoint_hook)
        self._checkpointer.mark = mark
        self._busy_since_trim = False
        self.relocations = Relocations(index=index, entry_log=entry_log,
                                       checkpoint_lock=self._checkpointer.lock,
                                       is_locally_stored=self._table.is_locally_stored,
                                       local_first_entry_id=self._table.local_first_entry_id,
                                       watch_liveness=self._table.watch_liveness,
                                       unindexed_from=lambda: self._checkpointer.unindexed_from)
        # Cluster mode: this engine as a bookie holding other writers' replicas.
        self.replicas = Replicas(table=self._table, appender=self._appender,
                                 storage=self.storage, limits=self._limits,
                                 check_not_broken=self._health.check_not_broken)
        self._local_copies = LocalCopies(
            table=self._table, appender=self._appender, storage=self.storage,
            checkpoint=self.checkpoint, checkpoint_lock=self._checkpointer.lock,
            check_not_broken=self._health.check_not_broken,
            remote_readable=self._reader.remote_readable)
        self.replay_report: ReplayReport | None = None

    # --- lifecycle -------------------------------------------------------

    @classmethod
    def open(cls, settings: EngineSettings, *, remote: RemoteEntryReader | None = None,
             checkpoint_hook: CheckpointHook | None = None,
             read_hook: ReadHook | None = None) -> Bookie:
        """Open (or create) the stores, replay the journal, start background threads."""
        settings.check()
        index, entry_log, journal, password_key = open_stores(settings)
        bookie = cls(settings, journal=journal, index=index, entry_log=entry_log,
                     password_key=password_key.key, remote=remote,
                     checkpoint_hook=checkpoint_hook, read_hook=read_hook)
        bookie._recover()
        if password_key.made:  # once per data directory: a scan of the ledgers is fine
            try:
                refuse_lost_key(settings.data_dir, bookie._table.keyed_password_count())
            except BaseException:
                bookie.close()
                raise
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
        if self._health.closed:
            return
        self._health.mark_closed()
        self._flusher.stop()
        try:
            if self._health.broken is None:
                self._checkpoint_in_background()  # on a full disk the journal keeps it
        finally:
            self.journal.close()
            self.storage.close()

    # --- ledgers ---------------------------------------------------------

    def create_ledger(self, *, password: str, metadata: Mapping[str, str],
                      block: bool = True) -> Pending[LedgerInfo]:
        """A new OPEN ledger once its CREATE is durable.  ``block`` as for
        :meth:`append`: False raises WouldBlock, having changed nothing, rather
        than wait for room in the journal (the password's keyed hash never waits)."""
        return self._writes.create(password, metadata, block)

    def get_ledger(self, ledger_id: int) -> LedgerInfo:
        return self._table.view(ledger_id).info()

    def authorize(self, ledger_id: int, *, password: str, block: bool = True) -> LedgerInfo:
        """The ledger, once ``password`` is known to be its password: NoSuchLedger,
        Unauthorized.  For callers that check once and then add many times (append
        streams check at the upgrade).  ``block`` as for :meth:`append`."""
        return self._writes.authorized(ledger_id, password, block=block).info()

    def password_verified(self, ledger_id: int, password: str) -> bool:
        """Whether ``password`` is the ledger's password, known without a KDF
        (never waits: the cheap test an add makes): a keyed hash is checked here,
        a scrypt hash only if verified before.  False means wrong, or only
        :meth:`authorize` can tell.  NoSuchLedger for an unknown ledger."""
        return self._writes.password_verified(ledger_id, password)

    def list_ledgers(self, *, state: LedgerState | None = None, after: int | None = None,
                     limit: int = 100, where: LedgerFilter | None = None,
                     ) -> tuple[list[LedgerInfo], int | None]:
        """A page of ledgers in id order (see ``LedgerTable.page``: a narrow filter
        may answer a short page that is not the last)."""
        if limit <= 0:
            raise BadRequest("limit must be positive")
        return self._table.page(state=state, after=after, limit=limit, where=where)

    def fence(self, ledger_id: int, *, password: str) -> Pending[LedgerInfo]:
        return self._writes.metadata_event(ledger_id, password, events.FenceEvent(ledger_id))

    def close_ledger(self, ledger_id: int, *, password: str) -> Pending[LedgerInfo]:
        # The CLOSE record follows every add of the ledger in the journal, so once
        # it is synced all of them are acknowledged and the LAC is final.
        return self._writes.metadata_event(ledger_id, password,
                                           events.CloseEvent(ledger_id, time.time()))

    def delete_ledger(self, ledger_id: int, *, password: str) -> Pending[None]:
        return self._writes.delete(ledger_id, password)

    # --- entries ---------------------------------------------------------

    def append(self, ledger_id: int, batches: Sequence[Batch], *, password: str,
               block: bool = True) -> list[Pending[BatchAddResult]]:
        """The one way entries are added: consecutive batches ``(expected_first_entry_id,
        payloads)`` of one ledger (a single add is a batch of one entry), each
        all acknowledged or none, the run under one add lock, in as few journal
        records as the batch limits allow (a batch never spans two), with one
        journal future.  The outcome is durable once a
        Pending's ``result()`` returns; the Pendings resolve together.

        An expected first id makes a batch idempotent: the whole batch already
        there from it is answered with ``already_present``, not the next id is
        EntryConflict.  Returns the Pendings of a prefix of ``batches``, at least
        the first (whose error is raised); the run ends before a batch that
        cannot join it (over the limits, an idempotent retry, a conflict, no room
        while the ones before it had some), which the caller submits again: it is
        then appended or raises.

        With ``block=True`` it may wait: up to ``write_cache.wait_s_max`` under
        back-pressure, for scrypt on a password not yet verified, for a disk read
        on an idempotent retry; call it off the event loop.  With ``block=False``
        any of those raises :class:`WouldBlock` instead, having changed nothing,
        so the common case can run on the event loop itself."""
        return self._writes.append(ledger_id, batches, password, block)

    def read_entry(self, ledger_id: int, entry_id: int) -> Entry:
        """One acknowledged entry (NoSuchEntry past the LAC), from S3 if dropped locally."""
        return self._reader.read_entry(ledger_id, entry_id)

    def scan_entries(self, ledger_id: int, start: int = 0,
                     end: int | None = None) -> Iterator[Entry]:
        """Entries ``start..end`` (capped at the LAC seen when called) for bulk
        readers such as offload: CRC-verified like reads, but bypassing the read
        cache; entries whose local copy is gone come from S3."""
        return self._reader.scan_entries(ledger_id, start, end)

    def read_entries(self, ledger_id: int, start: int = 0, end: int | None = None,
                     limit: int | None = None) -> Iterator[Entry]:
        """Entries ``start..end`` (inclusive, ``end`` defaults to and is capped at
        the LAC seen when called), read lazily one at a time."""
        return self._reader.read_entries(ledger_id, start, end, limit)

    # --- offload seams -----------------------------------------------------

    @property
    def next_ledger_id(self) -> int:
        """Ids below this that ``list_ledgers`` does not show were deleted (never reused)."""
        return self._table.next_ledger_id

    def set_offload(self, ledger_id: int, info: OffloadInfo) -> LedgerInfo:
        """Record a ledger's offload state; durable (checkpointed) on return."""
        return self._local_copies.set_offload(ledger_id, info)

    def set_offloads(self, infos: Mapping[int, OffloadInfo]) -> list[LedgerInfo]:
        """Record several ledgers' offload states in one checkpoint (all or none)."""
        return self._local_copies.set_offloads(infos)

    def record_tier_position(self, ledger_id: int, position: TierPosition) -> LedgerInfo:
        """Record how far the ledger is tiered to S3 (a TIER journal record; positions
        only grow); durable on return, allowed on a read-only bookie."""
        return self._local_copies.record_tier_position(ledger_id, position)

    def offloaded_with_local_copy(self) -> list[int]:
        """Ledgers offloaded whole whose local copy is still here (what GC may
        drop), kept as offloads finish: a GC run walks these, not every ledger."""
        return self._table.offloaded_with_local_copy()

    def tiered_beyond_local(self) -> list[int]:
        """Ledgers tiered past their first local entry (whose local entries below
        the tier position GC may drop), kept as tier positions move."""
        return self._table.tiered_beyond_local()

    def drop_local_entries(self, below: Mapping[int, int]) -> list[int]:
        """Make each ledger's tiered local entries below ``below[ledger_id]`` garbage
        (read from S3 after); returns the ledgers whose first local entry moved."""
        return self._local_copies.drop_local_entries(below)

    def drop_local_copy(self, ledger_id: int) -> bool:
        """Make an offloaded ledger's local entries garbage (read from S3 after);
        False when the ledger is not offloaded, already dropped, or deleted."""
        return self._local_copies.drop_local_copy(ledger_id)

    # --- operations ------------------------------------------------------

    @property
    def read_only(self) -> bool:
        return self._health.read_only

    def set_read_only(self, read_only: bool) -> None:
        self._health.set_read_only(read_only)

    @property
    def broken(self) -> BaseException | None:
        return self._health.broken

    @property
    def disk_full(self) -> bool:
        return self._health.disk_full

    def checkpoint(self) -> CheckpointResult:
        """Make everything in the write cache durable in the entry log and index,
        then trim the journal up to the position noted at the swap.  A full disk
        (``DiskFull``) turns the bookie read-only until a checkpoint succeeds
        again (GC and deletes free space; reads go on); any other failure latches
        it broken (writes refused, reads served)."""
        return self._health.checkpoint(self._checkpointer.run)

    def commit_deletions(self) -> int:
        """Commit pending deletions on their own (see ``Checkpointer``): with a
        full disk, this is what lets GC reclaim the entry logs of deleted ledgers."""
        self._health.check_not_broken()
        return self._checkpointer.commit_deletions()

    def _checkpoint_in_background(self) -> None:
        """A checkpoint nobody waits for (the flusher, open, close): a full disk is
        logged and tried again later, anything else propagates.

        The first one that finds nothing new after one that did (the bookie went
        idle) gives the heap freed meanwhile back to the kernel: a burst of
        writes leaves request buffers, flushed memtables and frozen write-cache
        pages free in glibc's arenas, still counted in the RSS.  Once per busy
        spell, not per checkpoint: the arenas' walk costs milliseconds."""
        mark = self._checkpointer.mark
        try:
            self.checkpoint()
        except DiskFull as exc:
            log.warning("checkpoint deferred, the data disk is full: %s", exc)
        if self._checkpointer.mark != mark:
            self._busy_since_trim = True
        elif self._busy_since_trim:
            self._busy_since_trim = False
            release_free_heap()

    def last_log_mark(self) -> dict[str, int]:
        j = self.journal
        return {"checkpoint_offset": self._checkpointer.mark, "trim_offset": j.trim_offset,
                "synced_offset": j.synced_offset, "appended_offset": j.appended_offset}

    def statistics(self) -> BookieStatistics:
        return gather_statistics(self.storage, self.journal, self._checkpointer.last,
                                 ledger_count=len(self._table), read_only=self._health.read_only,
                                 replica_count=len(self._table.replicas),
                                 adds=self._appender.add_count, add_bytes=self._appender.add_bytes,
                                 reads=self._reader.read_count,
                                 checkpoints=self._checkpointer.count)
