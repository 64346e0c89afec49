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
    # Counts the changes applied (in memory only): a store that looked entries up
    # outside the add lock checks under it that nothing changed meanwhile.
    version: int = 0

    @property
    def storage_id(self) -> int:
        return replica_storage_id(self.ledger_id)

    def record(self) -> ReplicaRecord:
        return ReplicaRecord(self.ledger_id, self.fenced_epoch, self.lac, self.max_entry_epoch)


class ReplicaTable:
    """The replicas; ``apply`` is called under the add lock (live) or by replay."""

    def __init__(self, records: Iterable[ReplicaRecord]) -> None:
        self._replicas = {r.ledger_id: LiveReplica(r.ledger_id, r.fenced_epoch, r.lac,
                                                   r.max_entry_epoch) for r in records}
        self._dirty: set[int] = set()
        self._deleted: set[int] = set()

    def get(self, ledger_id: int) -> LiveReplica | None:
        return self._replicas.get(ledger_id)

    def __len__(self) -> int:
        return len(self._replicas)

    def ledger_ids(self) -> list[int]:
        return sorted(list(self._replicas))

    def deleted_since_checkpoint(self, ledger_id: int) -> bool:
        return ledger_id in self._deleted

    def apply(self, event: ReplicaEvent) -> LiveReplica | None:
        if isinstance(event, ReplicaDeleteEvent):
            replica = self._replicas.pop(event.ledger_id, None)
            self._dirty.discard(event.ledger_id)
            self._deleted.add(event.ledger_id)
            return replica
        replica = self._replicas.get(event.ledger_id)
        if replica is None:
            replica = self._replicas[event.ledger_id] = LiveReplica(event.ledger_id)
        if isinstance(event, ReplicaFenceEvent):
            replica.fenced_epoch = max(replica.fenced_epoch, event.epoch)
        else:
            self._apply_add(replica, event)
        replica.version += 1
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
        records = [self._replicas[i].record() for i in self._dirty if i in self._replicas]
        deleted = self._deleted
        self._dirty, self._deleted = set(), set()
        return records, deleted

    def restore_changes(self, records: Iterable[ReplicaRecord], deleted: set[int]) -> None:
        self._dirty.update(r.ledger_id for r in records)
        self._deleted |= deleted
