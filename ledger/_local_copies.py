"""The local-copy lifecycle: what offload/ and GC record about a ledger's entries.

Offload records a sealed ledger's progress (:meth:`LocalCopies.set_offload`)
and tiering how far an open one is in S3 (:meth:`record_tier_position`, a TIER
journal record).  GC, once a deletion lag has passed, then makes local entries
garbage: those below the tier position (:meth:`drop_local_entries`) or the
whole copy of an offloaded ledger (:meth:`drop_local_copy`).  Each drop is
persisted in one index batch with the removal of the dropped locations, so the
index never says "dropped" while still pointing at the entries, and from then
on reads of them go to S3 (``_reader.py``).  Nothing is dropped without an S3
reader to read it back.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import replace

from common.errors import BadRequest, NoSuchLedger

from . import _events as events
from ._appender import Appender
from ._checkpoint import CheckpointResult
from ._model import LedgerInfo, LedgerState, OffloadInfo, OffloadState, TierPosition
from ._storage import EntryStorage
from ._table import LedgerTable, LiveLedger

log = logging.getLogger(__name__)


class LocalCopies:
    def __init__(self, *, table: LedgerTable, appender: Appender, storage: EntryStorage,
                 checkpoint: Callable[[], CheckpointResult], checkpoint_lock: threading.Lock,
                 check_not_broken: Callable[[], None], remote_readable: bool) -> None:
        self._table = table
        self._appender = appender
        self._storage = storage
        self._checkpoint = checkpoint
        self._checkpoint_lock = checkpoint_lock
        self._check_not_broken = check_not_broken
        self._remote_readable = remote_readable

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
        self._checkpoint()
        return ledger.info()

    def set_offloads(self, infos: Mapping[int, OffloadInfo]) -> list[LedgerInfo]:
        """Record the offload state of several ledgers at once (a pack of small
        ledgers): one checkpoint persists them all, so either every record
        changes or, after a crash, none does.  Raises ``NoSuchLedger`` (nothing
        changed) if one of them is gone."""
        with self._appender.lock:
            self._check_not_broken()
            ledgers = [self._table.get(ledger_id) for ledger_id in infos]
            for ledger in ledgers:
                info = infos[ledger.ledger_id]
                if ledger.offload.local_deleted and not info.local_deleted:
                    raise BadRequest(f"ledger {ledger.ledger_id}: its local copy is "
                                     "already deleted")
            for ledger in ledgers:
                self._table.set_offload(ledger, infos[ledger.ledger_id])
        self._checkpoint()
        return [ledger.info() for ledger in ledgers]

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
        if not self._remote_readable:
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
            self._checkpoint()
            log.info("tiered local entries dropped", extra={
                "ledger_ids": moved, "below": {i: below[i] for i in moved}})
        return moved

    def drop_local_copy(self, ledger_id: int) -> bool:
        """Make an offloaded ledger's local entries garbage; reads go to S3 after.

        Returns False when the ledger is not offloaded, is dropped already, or
        is deleted (GC lists ledgers before it drops them, and a DELETE may come
        in between, or while this runs)."""
        if self._droppable(ledger_id) is None:
            return False
        self._checkpoint()  # every entry of the (closed) ledger is now in the index
        with self._checkpoint_lock:
            with self._appender.lock:
                # Asked again under the lock deletions take: a DELETE made since
                # may be committed already (by the checkpoint above), and the
                # record written below would bring the ledger back for good.
                ledger = self._droppable(ledger_id)
                if ledger is None:
                    return False
                self._table.set_offload(ledger, replace(ledger.offload, local_deleted=True))
                record = ledger.snapshot_record()
            # The record and the end of its locations in one batch: the index
            # never says "local copy dropped" while still pointing at it.
            batch = self._storage.index.batch()
            batch.put_ledger(record)
            batch.delete_locations(ledger_id)
            self._storage.index.commit(batch)
            self._storage.read_cache.drop_ledger(ledger_id)
        log.info("local copy dropped ledger_id=%d", ledger_id, extra={"ledger_id": ledger_id})
        return True

    def _droppable(self, ledger_id: int) -> LiveLedger | None:
        """The ledger, if it exists, is offloaded whole, is still held locally,
        and can be read back from S3; None otherwise."""
        try:
            ledger = self._table.get(ledger_id)
        except NoSuchLedger:
            return None
        if (ledger.state != LedgerState.CLOSED or ledger.offload.state != OffloadState.OFFLOADED
                or ledger.offload.local_deleted or not self._remote_readable):
            return None
        return ledger
