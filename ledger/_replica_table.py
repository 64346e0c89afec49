"""Replicas held by this bookie in cluster mode, and the one place their state changes.

A replica is one ledger's copy on this bookie (docs/cluster.md §5.1, §12.1): a
durable ``fenced_epoch``, the highest LAC a writer piggybacked, and the entries
writers and the auditor sent, under the writers' (not necessarily dense) ids.
Its entries live in the same write cache, entry logs and index as a standalone
ledger's, under the storage id ``ledger_id | REPLICA_BIT``, so a replica and a
standalone ledger with the same id never share a key.  Each stored entry is
``REPLICA_PREFIX`` (epoch, length_after) followed by the payload.

Replica record (RocksDB ``replicas`` family, key ``ledger_id`` u64 BE), 25 bytes:

===  ====  ===============  =====
off  size  field            type
===  ====  ===============  =====
0    1     format version   u8 = 1
1    8     fenced_epoch     u64
9    8     lac              i64
17   8     max_entry_epoch  u64 (the highest epoch of any entry stored)
===  ====  ===============  =====
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Iterable
from dataclasses import dataclass

from common.errors import InvariantViolation, invariant

from ._events import (
    REPLICA_PREFIX,
    ReplicaAddEvent,
    ReplicaDeleteEvent,
    ReplicaEvent,
    ReplicaFenceEvent,
)

REPLICA_BIT = 1 << 63
_RECORD = struct.Struct(">BQqQ")
_RECORD_VERSION = 1
invariant(_RECORD.size == 25, "replica record layout")


def replica_storage_id(ledger_id: int) -> int:
    """The id a replica's entries are stored under (apart from standalone ledgers)."""
    invariant(0 <= ledger_id < REPLICA_BIT, f"replica ledger id {ledger_id} out of range")
    return ledger_id | REPLICA_BIT


def is_replica_storage_id(storage_id: int) -> bool:
    return storage_id >= REPLICA_BIT


@dataclass(frozen=True, slots=True)
class ReplicaRecord:
    ledger_id: int
    fenced_epoch: int
    lac: int
    max_entry_epoch: int

    def encode(self) -> bytes:
        return _RECORD.pack(_RECORD_VERSION, self.fenced_epoch, self.lac, self.max_entry_epoch)

    @classmethod
    def decode(cls, ledger_id: int, raw: bytes) -> ReplicaRecord:
        try:
            version, fenced, lac, max_epoch = _RECORD.unpack(raw)
        except struct.error as exc:
            raise InvariantViolation(f"replica record of ledger {ledger_id}: {exc}") from exc
        invariant(version == _RECORD_VERSION, f"replica record of ledger {ledger_id}: "
                  f"unknown version {version}")
        return cls(ledger_id, fenced, lac, max_epoch)


@dataclass(slots=True)
class LiveReplica:
    ledger_id: int
    fenced_epoch: int = 0
    lac: int = -1
    max_entry_epoch: int = 0
    # Changes when the replica does (in memory only): a store that looked entries
    # up outside the add lock checks under it that nothing changed meanwhile.  A
    # stamp of the table's clock, not a per-replica count: see ReplicaTable.
    version: int = 0

    @property
    def storage_id(self) -> int:
        return replica_storage_id(self.ledger_id)

    def record(self) -> ReplicaRecord:
        return ReplicaRecord(self.ledger_id, self.fenced_epoch, self.lac, self.max_entry_epoch)


# A compact replica is one int, from its low bits: the bit lengths of
# max_entry_epoch and fenced_epoch (7 bits each: 0 … 64), then those two fields
# at those lengths, then lac + 1.  Fields of variable length keep the usual
# replica (epochs of a few bits, a LAC below 2^44) under 2^60, the smallest int
# object but one; a tuple of the three would be an object and three ints.
_WIDTH_BITS = 7
_WIDTH_MASK = (1 << _WIDTH_BITS) - 1
_EPOCH_END = 1 << 64       # fenced_epoch and max_entry_epoch are u64 in the record
_LAC_END = 1 << 63         # lac is i64, -1 when nothing is confirmed


def pack_replica(fenced_epoch: int, lac: int, max_entry_epoch: int) -> int:
    """The compact form of a replica's state (any value its record can hold)."""
    invariant(0 <= fenced_epoch < _EPOCH_END and 0 <= max_entry_epoch < _EPOCH_END
              and -1 <= lac < _LAC_END,
              f"replica state out of range: fenced_epoch {fenced_epoch}, lac {lac}, "
              f"max_entry_epoch {max_entry_epoch}")
    fenced_bits, max_bits = fenced_epoch.bit_length(), max_entry_epoch.bit_length()
    packed = (((lac + 1) << fenced_bits | fenced_epoch) << max_bits) | max_entry_epoch
    return (packed << 2 * _WIDTH_BITS) | (fenced_bits << _WIDTH_BITS) | max_bits


def unpack_replica(packed: int) -> tuple[int, int, int]:
    """(fenced_epoch, lac, max_entry_epoch) of a :func:`pack_replica` value."""
    max_bits = packed & _WIDTH_MASK
    fenced_bits = (packed >> _WIDTH_BITS) & _WIDTH_MASK
    packed >>= 2 * _WIDTH_BITS
    max_entry_epoch = packed & ((1 << max_bits) - 1)
    packed >>= max_bits
    fenced_epoch = packed & ((1 << fenced_bits) - 1)
    return fenced_epoch, (packed >> fenced_bits) - 1, max_entry_epoch


class ReplicaTable:
    """The replicas; ``apply`` is called under the add lock (live) or by replay.

    Most replicas a bookie holds belong to idle ledgers, so a replica is kept
    compact (one int, :func:`pack_replica`) except from its first change
    (``apply``) until the next checkpoint takes the table's changes, when it is
    packed again: a :class:`LiveReplica` would add an object and an int or two
    to each (docs/cluster.md, "What an open ledger costs in memory").  Nothing
    walks the replicas to pack them: a checkpoint packs those it takes, which
    are all the live ones.  Only the table changes a replica (``apply``,
    ``note_lac``, ``take_changes``, each under ``_lock``); ``get`` hands a
    compact one out decoded, a copy, so its callers only read.

    ``version`` is a stamp of one clock (``_clock``) that ticks at each change
    and at each packing: a live replica shows the tick of its last change, a
    compact one the tick of the last packing (``_packed_at``).  So a replica
    that changed and was packed again between two looks shows another version
    (a per-replica count, lost when packed, would show 0 both times), and one
    left alone shows the same; a packing of other replicas meanwhile only costs
    a store a needless retry."""

    def __init__(self, records: Iterable[ReplicaRecord]) -> None:
        self._replicas: dict[int, LiveReplica | int] = {
            r.ledger_id: pack_replica(r.fenced_epoch, r.lac, r.max_entry_epoch)
            for r in records}
        self._dirty: set[int] = set()
        self._deleted: set[int] = set()
        # Held by every change, so that note_lac (not under the add lock) never
        # writes over a replica turned live or packed meanwhile.  Readers do not
        # take it: a dict lookup sees a replica either as it was or as it is.
        self._lock = threading.Lock()
        self._clock = 0
        self._packed_at = 0

    def get(self, ledger_id: int) -> LiveReplica | None:
        """The replica as it is now (None when not held): the live object the
        table keeps, or a compact one decoded for the caller; either way only to
        read (changes go through ``apply`` and ``note_lac``)."""
        packed_at = self._packed_at  # before the lookup: see the class doc
        held = self._replicas.get(ledger_id)
        if held is None or isinstance(held, LiveReplica):
            return held
        return _decoded(ledger_id, held, packed_at)

    def holds(self, ledger_id: int) -> bool:
        return ledger_id in self._replicas

    def __len__(self) -> int:
        return len(self._replicas)

    def compact_count(self) -> int:
        """Replicas kept compact (a scan: for tests)."""
        return sum(1 for held in list(self._replicas.values()) if isinstance(held, int))

    def ledger_ids(self) -> list[int]:
        return sorted(list(self._replicas))

    def deleted_since_checkpoint(self, ledger_id: int) -> bool:
        return ledger_id in self._deleted

    def note_lac(self, ledger_id: int, lac: int) -> int:
        """Raise the replica's LAC to ``lac`` (in memory only); the LAC afterwards,
        -1 when no replica is held.  A compact replica stays compact."""
        with self._lock:
            held = self._replicas.get(ledger_id)
            if held is None:
                return -1
            if isinstance(held, LiveReplica):
                if lac > held.lac:
                    held.lac = lac
                return held.lac
            fenced_epoch, held_lac, max_entry_epoch = unpack_replica(held)
            if lac <= held_lac:
                return held_lac
            self._replicas[ledger_id] = pack_replica(fenced_epoch, lac, max_entry_epoch)
            return lac

    def apply(self, event: ReplicaEvent) -> LiveReplica | None:
        with self._lock:
            if isinstance(event, ReplicaDeleteEvent):
                held = self._replicas.pop(event.ledger_id, None)
                self._dirty.discard(event.ledger_id)
                self._deleted.add(event.ledger_id)
                if isinstance(held, int):
                    return _decoded(event.ledger_id, held, self._packed_at)
                return held
            held = self._replicas.get(event.ledger_id)
            if isinstance(held, LiveReplica):
                replica = held
            else:
                replica = LiveReplica(event.ledger_id) if held is None \
                    else _decoded(event.ledger_id, held, 0)
                self._replicas[event.ledger_id] = replica
            if isinstance(event, ReplicaFenceEvent):
                replica.fenced_epoch = max(replica.fenced_epoch, event.epoch)
            else:
                self._apply_add(replica, event)
            self._clock += 1
            replica.version = self._clock
            self._dirty.add(replica.ledger_id)
            return replica

    @staticmethod
    def _apply_add(replica: LiveReplica, event: ReplicaAddEvent) -> None:
        # An add of a newer writer fences the older ones too (rule 2 of §5.1);
        # a copy carries fence_epoch 0 and lac -1 and changes neither.
        replica.fenced_epoch = max(replica.fenced_epoch, event.fence_epoch)
        replica.lac = max(replica.lac, event.lac)
        for stored in event.stored:
            epoch, _length_after = REPLICA_PREFIX.unpack_from(stored)
            replica.max_entry_epoch = max(replica.max_entry_epoch, epoch)

    def take_changes(self) -> tuple[list[ReplicaRecord], set[int]]:
        """The records of the replicas changed since the last call, and those
        deleted; the changed ones are packed again (every live replica is one of
        them: only ``apply`` turns a replica live, and it marks it changed)."""
        with self._lock:
            records: list[ReplicaRecord] = []
            if self._dirty:
                self._clock += 1
                self._packed_at = self._clock
            for ledger_id in self._dirty:
                held = self._replicas.get(ledger_id)
                if held is None:
                    continue
                if isinstance(held, LiveReplica):
                    record = held.record()
                    self._replicas[ledger_id] = pack_replica(
                        record.fenced_epoch, record.lac, record.max_entry_epoch)
                else:
                    # Packed already: a failed checkpoint gave its changes back.
                    record = ReplicaRecord(ledger_id, *unpack_replica(held))
                records.append(record)
            deleted = self._deleted
            self._dirty, self._deleted = set(), set()
            return records, deleted

    def restore_changes(self, records: Iterable[ReplicaRecord], deleted: set[int]) -> None:
        with self._lock:
            self._dirty.update(r.ledger_id for r in records)
            self._deleted |= deleted


def _decoded(ledger_id: int, packed: int, version: int) -> LiveReplica:
    fenced_epoch, lac, max_entry_epoch = unpack_replica(packed)
    return LiveReplica(ledger_id, fenced_epoch, lac, max_entry_epoch, version)
