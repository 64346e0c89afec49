"""The bookie side of the protocol as a small pure model (docs/cluster.md §5.1).

``ReplicaRules.apply(replica, request)`` is what the engine must enforce for one
ledger's replica: fencing by epoch, refusal of older epochs, the piggybacked LAC,
replacement of stale entries.  The simulation's bookies run exactly this; the
engine implements the same rules durably (journal records for adds and fences)
and ``tests/cluster/test_protocol.py`` pins them; seeded differential runs
(``tests/cluster/test_replica_rules_engine.py``) check the engine against them.
A test-only subclass breaks one rule to prove the simulation catches it (STYLE
13: injected, never patched).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from common.errors import InvariantViolation

from ._messages import (
    AddEntries,
    AddsOk,
    BookieReply,
    BookieRequest,
    CopiesOk,
    CopyEntries,
    CopyEntry,
    CopyOk,
    Deleted,
    DeleteReplica,
    EntriesHeld,
    EntriesRead,
    EntryFound,
    Fence,
    Fenced,
    FenceOk,
    LacIs,
    ListEntries,
    NoEntry,
    ReadEntries,
    ReadEntry,
    ReadLac,
    RecoveryRead,
    WriteLac,
)


@dataclass(frozen=True, slots=True)
class StoredEntry:
    epoch: int
    payload: bytes
    length_after: int


@dataclass(slots=True)
class Replica:
    """One ledger's replica on one bookie: all of it durable once answered."""

    ledger_id: int
    fenced_epoch: int = 0
    lac: int = -1
    entries: dict[int, StoredEntry] = field(default_factory=dict)


class ReplicaRules:
    """The rules a bookie applies to each request about a replica."""

    def apply(self, replica: Replica | None, request: BookieRequest,
              ) -> tuple[Replica | None, BookieReply]:
        """(the replica afterwards, the answer); ``None`` is "no replica here"."""
        if isinstance(request, DeleteReplica):
            return None, Deleted(request.ledger_id)
        existing = replica
        if replica is None:
            replica = Replica(request.ledger_id)
        if isinstance(request, (ReadEntry, ReadEntries, ReadLac, ListEntries)):
            # Reads never create a replica.
            return existing, self._answer_read(replica, request)
        if isinstance(request, WriteLac):
            # A hint: it neither creates a replica nor moves its LAC back.
            if existing is not None:
                existing.lac = max(existing.lac, request.lac)
            return existing, LacIs(request.ledger_id, replica.lac)
        if isinstance(request, AddEntries):
            return replica, self.add(replica, request)
        if isinstance(request, Fence):
            return replica, self.fence(replica, request.epoch)
        if isinstance(request, RecoveryRead):
            answer = self.fence(replica, request.epoch)
            if isinstance(answer, Fenced):
                return replica, answer
            return replica, self.read(replica, request.entry_id)
        if isinstance(request, CopyEntry):
            return replica, self.copy(replica, request)
        if isinstance(request, CopyEntries):
            for copy in request.entries:
                self.copy(replica, copy)
            return replica, CopiesOk(replica.ledger_id,
                                     tuple(c.entry_id for c in request.entries))
        raise InvariantViolation(f"unknown request {request!r}")

    def _answer_read(self, replica: Replica,
                     request: ReadEntry | ReadEntries | ReadLac | ListEntries,
                     ) -> BookieReply:
        if isinstance(request, ReadEntry):
            return self.read(replica, request.entry_id)
        if isinstance(request, ReadEntries):
            return self.read_many(replica, request)
        if isinstance(request, ReadLac):
            return LacIs(replica.ledger_id, replica.lac, replica.fenced_epoch)
        held = tuple((e, replica.entries[e].epoch) for e in sorted(replica.entries)
                     if request.first <= e <= request.last)
        return EntriesHeld(replica.ledger_id, held)

    def add(self, replica: Replica, request: AddEntries) -> BookieReply:
        """Every entry of ``request``, or (fenced) none."""
        if self.refuses_epoch(replica, request.epoch):
            return Fenced(replica.ledger_id, replica.fenced_epoch, replica.lac)
        # An add of a newer writer fences the older ones too: once a bookie has
        # seen epoch N it can never again help epoch N-1 reach Qa.
        replica.fenced_epoch = max(replica.fenced_epoch, request.epoch)
        replica.lac = max(replica.lac, request.lac)
        for entry in request.entries:
            _store(replica, entry.entry_id, request.epoch, entry.payload, entry.length_after)
        return AddsOk(replica.ledger_id, request.epoch, replica.lac,
                      tuple(e.entry_id for e in request.entries))

    def refuses_epoch(self, replica: Replica, epoch: int) -> bool:
        return epoch < replica.fenced_epoch

    def fence(self, replica: Replica, epoch: int) -> BookieReply:
        if epoch < replica.fenced_epoch:
            return Fenced(replica.ledger_id, replica.fenced_epoch, replica.lac)
        replica.fenced_epoch = epoch
        return FenceOk(replica.ledger_id, epoch, replica.lac)

    def read(self, replica: Replica, entry_id: int) -> BookieReply:
        stored = replica.entries.get(entry_id)
        if stored is None:
            return NoEntry(replica.ledger_id, entry_id, replica.lac)
        return EntryFound(replica.ledger_id, entry_id, stored.epoch, stored.payload,
                          stored.length_after, replica.lac)

    def read_many(self, replica: Replica, request: ReadEntries) -> BookieReply:
        found: list[EntryFound] = []
        absent: list[int] = []
        size = 0
        for entry_id in request.entry_ids:
            if found and size >= request.bytes_max:
                break  # the rest is read by the next call
            stored = replica.entries.get(entry_id)
            if stored is None:
                absent.append(entry_id)
                continue
            size += len(stored.payload)
            found.append(EntryFound(replica.ledger_id, entry_id, stored.epoch, stored.payload,
                                    stored.length_after, replica.lac))
        return EntriesRead(replica.ledger_id, tuple(found), tuple(absent), replica.lac)

    def copy(self, replica: Replica, request: CopyEntry) -> BookieReply:
        _store(replica, request.entry_id, request.epoch, request.payload, request.length_after)
        return CopyOk(replica.ledger_id, request.entry_id)


def _store(replica: Replica, entry_id: int, epoch: int, payload: bytes,
           length_after: int) -> None:
    """Store if absent, replace a lower epoch, keep a higher one; the same epoch must
    hold the same bytes (one writer per epoch assigns an id once)."""
    stored = replica.entries.get(entry_id)
    if stored is not None and stored.epoch == epoch:
        if stored.payload != payload:
            raise InvariantViolation(f"ledger {replica.ledger_id} entry {entry_id}: "
                                     f"two payloads at epoch {epoch}")
    elif stored is None or stored.epoch < epoch:
        replica.entries[entry_id] = StoredEntry(epoch, payload, length_after)
