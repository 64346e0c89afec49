"""The engine as a bookie of cluster mode: replicas (docs/cluster.md §5.1, §12.1).

``Bookie.replicas`` stores what writers and the auditor send: entries under the
writers' ids (not dense), each with the epoch that wrote it and the ledger's
length after it, a durable ``fenced_epoch`` and the piggybacked LAC.  The rules
are ``cluster.ReplicaRules``' (the simulation's reference model; seeded runs in
``tests/cluster/test_replica_rules_engine.py`` send both the same conversations,
restarts included, and compare every answer):

1. an add of an epoch below ``fenced_epoch`` is refused (``ReplicaFenced``) and
   changes nothing;
2. otherwise it raises ``fenced_epoch`` to its epoch, keeps the max LAC, and
   stores each entry if absent, again if present at the same epoch (a resend:
   the same bytes), in place of one at a lower epoch, and not over one at a
   higher epoch;
3. a fence raises ``fenced_epoch`` (or is refused for an older epoch);
4. a copy stores like an add but is not fence-checked and changes no fence;
5. every durable call returns a :class:`~ledger.Pending` that resolves once its
   one journal record is synced: the node answers only then.

An entry stored here is ``REPLICA_PREFIX`` (epoch, length_after) + payload, in
the journal, the write cache and the entry log alike; reads strip the prefix
and checksum the payload for the answer.  Replica reads skip the read cache.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import crc32c

from common.errors import (
    InvariantViolation,
    NoSuchEntry,
    NoSuchLedger,
    ReplicaFenced,
    WouldBlock,
)

from . import _events as events
from ._appender import Appender
from ._model import Pending
from ._replica_table import LiveReplica, replica_storage_id
from ._settings import LedgerLimits
from ._storage import EntryStorage
from ._table import LedgerTable


@dataclass(frozen=True, slots=True)
class ReplicaEntry:
    """One entry as a writer or the auditor sends it to a replica."""

    entry_id: int
    epoch: int
    payload: bytes
    length_after: int


@dataclass(frozen=True, slots=True)
class StoredReplicaEntry:
    entry_id: int
    epoch: int
    payload: bytes
    length_after: int
    crc32c: int  # of the payload
    lac: int     # the replica's LAC when read


@dataclass(frozen=True, slots=True)
class ReplicaState:
    fenced_epoch: int
    lac: int


class _Changed(Exception):
    """Internal: the replica changed between a lookup and the add lock."""


class Replicas:
    def __init__(self, *, table: LedgerTable, appender: Appender, storage: EntryStorage,
                 limits: LedgerLimits, check_not_broken: Callable[[], None]) -> None:
        self._table = table
        self._replicas = table.replicas
        self._appender = appender
        self._storage = storage
        self._limits = limits
        self._check_not_broken = check_not_broken

    # --- durable calls ---------------------------------------------------------

    def add(self, ledger_id: int, entries: Sequence[ReplicaEntry], *, epoch: int,
            lac: int, block: bool = True) -> Pending[ReplicaState]:
        """Store a writer's entries at ``epoch`` (one journal record); raises
        ``ReplicaFenced`` when the replica is fenced above ``epoch``.  With
        ``block=False`` it raises ``WouldBlock``, having changed nothing, where it
        would wait (for room, or to read entries of older epochs back)."""
        for entry in entries:
            if entry.epoch != epoch:
                raise InvariantViolation(f"ledger {ledger_id} entry {entry.entry_id}: "
                                         f"epoch {entry.epoch} in an add at {epoch}")
        return self._store(ledger_id, entries, fence_epoch=epoch, lac=lac, block=block)

    def copy(self, ledger_id: int, entries: Sequence[ReplicaEntry]) -> Pending[ReplicaState]:
        """Store committed entries re-replication copied (rule 4: no fence check)."""
        return self._store(ledger_id, entries, fence_epoch=0, lac=-1)

    def fence(self, ledger_id: int, epoch: int) -> Pending[ReplicaState]:
        """Refuse adds below ``epoch`` from now on, durably; ``ReplicaFenced`` if the
        replica is fenced above it already."""
        if epoch < 1:
            raise InvariantViolation(f"ledger {ledger_id}: fence at epoch {epoch}")

        def decide() -> events.ReplicaEvent:
            self._check_not_broken()
            replica = self._check_creatable(ledger_id)
            if replica is not None and epoch < replica.fenced_epoch:
                raise ReplicaFenced(ledger_id, replica.fenced_epoch, replica.lac)
            return events.ReplicaFenceEvent(ledger_id, epoch)

        append = self._appender.commit_replica(decide, self.apply, writable=False)
        return Pending(append.future, lambda: self.state(ledger_id))

    def delete(self, ledger_id: int) -> Pending[None]:
        """Drop the replica (entries, fence, LAC); GC reclaims its space."""

        def decide() -> events.ReplicaEvent:
            self._check_not_broken()
            return events.ReplicaDeleteEvent(ledger_id)

        append = self._appender.commit_replica(decide, self.apply, writable=False)
        return Pending(append.future, lambda: None)

    # --- reads ------------------------------------------------------------------

    def read(self, ledger_id: int, entry_id: int) -> StoredReplicaEntry:
        """The stored entry, whatever its epoch (the reader judges it); NoSuchEntry."""
        replica = self._replicas.get(ledger_id)
        if replica is None:
            raise NoSuchEntry(ledger_id, entry_id)
        stored, _crc = self._storage.get(replica.storage_id, entry_id, cached=False)
        epoch, length_after, payload = events.replica_unstored(stored)
        return StoredReplicaEntry(entry_id, epoch, payload, length_after,
                                  crc32c.crc32c(payload), replica.lac)

    def note_lac(self, ledger_id: int, lac: int) -> int:
        """Raise the replica's LAC to the writer's explicit ``lac`` (in memory only: a
        hint for readers, never journaled); the LAC afterwards, -1 with no replica."""
        return self._replicas.note_lac(ledger_id, lac)

    def state(self, ledger_id: int) -> ReplicaState:
        """``fenced_epoch`` and LAC (0 and -1 when this bookie holds no replica)."""
        replica = self._replicas.get(ledger_id)
        if replica is None:
            return ReplicaState(0, -1)
        return ReplicaState(replica.fenced_epoch, replica.lac)

    def entries(self, ledger_id: int, first: int, last: int, *,
                limit: int) -> list[tuple[int, int]]:
        """(entry_id, epoch) of the entries held in ``first … last``, at most
        ``limit``, in id order.  Each epoch is read from the stored entry."""
        replica = self._replicas.get(ledger_id)
        if replica is None or last < first or limit <= 0:
            return []
        storage_id = replica.storage_id
        ids = set(self._storage.write_cache.ids_between(storage_id, first, last))
        ids.update(self._storage.index.entry_ids_between(storage_id, first, last))
        held: list[tuple[int, int]] = []
        for entry_id in sorted(ids):
            epoch = self._stored_epoch(storage_id, entry_id)
            if epoch is not None:
                held.append((entry_id, epoch))
                if len(held) >= limit:
                    break
        return held

    def holds(self, ledger_id: int) -> bool:
        """Whether this bookie holds a replica of the ledger."""
        return self._replicas.holds(ledger_id)

    def count(self) -> int:
        """How many replicas this bookie holds (without listing them)."""
        return len(self._replicas)

    def ledger_ids(self) -> list[int]:
        """The ledgers this bookie holds a replica of (for the orphan sweep)."""
        return self._replicas.ledger_ids()

    # --- live and replay alike ---------------------------------------------------

    def apply(self, event: events.ReplicaEvent) -> None:
        """The one code path of a replica state change (live under the add lock,
        and replay): the table's state, then the entries into the write cache."""
        self._table.apply_replica(event)
        if isinstance(event, events.ReplicaAddEvent):
            storage_id = replica_storage_id(event.ledger_id)
            cache = self._storage.write_cache
            for entry_id, stored, crc in zip(event.entry_ids, event.stored, event.crcs,
                                             strict=True):
                cache.put(storage_id, entry_id, stored, crc)

    # --- internals -----------------------------------------------------------------

    def _store(self, ledger_id: int, entries: Sequence[ReplicaEntry], *, fence_epoch: int,
               lac: int, block: bool = True) -> Pending[ReplicaState]:
        if entries:
            self._limits.check_batch([e.payload for e in entries])
        stored = [events.replica_stored(e.epoch, e.length_after, e.payload) for e in entries]
        crcs = [crc32c.crc32c(s) for s in stored]
        while True:
            replica = self._replicas.get(ledger_id)
            seen = -1 if replica is None else replica.version
            # Only an entry below the highest epoch held can meet a higher one here:
            # look those (rare) up outside the lock, then check nothing changed.
            top = 0 if replica is None else replica.max_entry_epoch
            if not block and any(e.epoch < top for e in entries):
                raise WouldBlock(f"ledger {ledger_id}: entries of older epochs to read back")
            held = {e.entry_id: self._stored_epoch(replica_storage_id(ledger_id), e.entry_id)
                    for e in entries if e.epoch < top}

            def decide(seen: int = seen, held: dict[int, int | None] = held,
                       ) -> events.ReplicaEvent:
                self._check_not_broken()
                current = self._check_creatable(ledger_id)
                if (-1 if current is None else current.version) != seen:
                    raise _Changed()
                if fence_epoch and current is not None and fence_epoch < current.fenced_epoch:
                    raise ReplicaFenced(ledger_id, current.fenced_epoch, current.lac)
                keep = [i for i, e in enumerate(entries)
                        if (held.get(e.entry_id) or 0) <= e.epoch]
                return events.ReplicaAddEvent(
                    ledger_id, fence_epoch, lac, tuple(entries[i].entry_id for i in keep),
                    tuple(stored[i] for i in keep), tuple(crcs[i] for i in keep))

            try:
                append = self._appender.commit_replica(decide, self.apply, writable=True,
                                                       block=block)
            except _Changed:
                continue
            return Pending(append.future, lambda: self.state(ledger_id))

    def _check_creatable(self, ledger_id: int) -> LiveReplica | None:
        """The replica, or None when a store may create it.  A replica deleted since
        the last checkpoint is not created again until that checkpoint has dropped
        its locations (a late add of a deleted ledger is refused meanwhile)."""
        replica = self._replicas.get(ledger_id)
        if replica is None:
            if self._replicas.deleted_since_checkpoint(ledger_id):
                raise NoSuchLedger(ledger_id)
            self._table.check_room()
        return replica

    def _stored_epoch(self, storage_id: int, entry_id: int) -> int | None:
        try:
            stored, _crc = self._storage.get(storage_id, entry_id, cached=False)
        except NoSuchEntry:
            return None
        epoch, _length_after, _payload = events.replica_unstored(stored)
        return epoch
