"""In-memory state of one ledger while the bookie runs.

Two sets of counters: *assigned* (every entry given an id and appended to the
journal) and *acknowledged* (covered by an fdatasync; reads stop at the LAC).
Checkpoints persist the assigned counters, because a checkpoint first waits
until the journal is synced past everything it snapshots.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ._ledger_record import LedgerRecord
from ._model import LedgerInfo, LedgerState, OffloadInfo
from ._password import PasswordHash


@dataclass
class LiveLedger:
    ledger_id: int
    state: LedgerState
    password: PasswordHash
    created_at: float
    closed_at: float | None
    metadata: dict[str, str]
    offload: OffloadInfo = field(default_factory=OffloadInfo)
    next_entry_id: int = 0
    assigned_length: int = 0
    last_add_confirmed: int = -1
    length: int = 0
    deleted: bool = False

    @classmethod
    def from_record(cls, record: LedgerRecord) -> LiveLedger:
        return cls(
            ledger_id=record.ledger_id, state=record.state, password=record.password,
            created_at=record.created_at, closed_at=record.closed_at,
            metadata=dict(record.metadata), offload=record.offload,
            next_entry_id=record.last_entry_id + 1, assigned_length=record.length,
            last_add_confirmed=record.last_entry_id, length=record.length,
        )

    def snapshot_record(self) -> LedgerRecord:
        """The record a checkpoint persists (assigned counters; see module doc)."""
        return LedgerRecord(
            ledger_id=self.ledger_id, state=self.state, password=self.password,
            last_entry_id=self.next_entry_id - 1, length=self.assigned_length,
            created_at=self.created_at, closed_at=self.closed_at,
            metadata=dict(self.metadata), offload=self.offload,
        )

    def info(self) -> LedgerInfo:
        return LedgerInfo(
            ledger_id=self.ledger_id, state=self.state,
            last_add_confirmed=self.last_add_confirmed, length=self.length,
            entries=self.last_add_confirmed + 1, created_at=self.created_at,
            closed_at=self.closed_at, metadata=dict(self.metadata), offload=self.offload,
        )
