"""The engine seam offload codes against; ``ledger.Bookie`` conforms structurally."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Protocol

from ledger import Entry, LedgerInfo, LedgerState, OffloadInfo, TierPosition


class LedgerSource(Protocol):
    def get_ledger(self, ledger_id: int) -> LedgerInfo:
        """Raises ``NoSuchLedger``."""

    def list_ledgers(self, *, state: LedgerState | None = None, after: int | None = None,
                     limit: int = 100) -> tuple[list[LedgerInfo], int | None]: ...

    def scan_entries(self, ledger_id: int, start: int = 0,
                     end: int | None = None) -> Iterator[Entry]:
        """Entries ``start..end`` inclusive (capped at the LAC), CRC-verified,
        lazily, without going through the engine's read cache."""

    def set_offload(self, ledger_id: int, info: OffloadInfo) -> LedgerInfo:
        """Persist ``info`` durably (synced) before returning."""

    def record_tier_position(self, ledger_id: int, position: TierPosition) -> LedgerInfo:
        """Record how far the ledger is tiered, durably, before returning."""

    @property
    def next_ledger_id(self) -> int:
        """Ids below it that ``list_ledgers`` does not show were deleted (never reused)."""


class PackSource(LedgerSource, Protocol):
    """What packing needs besides: several ledgers' states in one checkpoint."""

    def set_offloads(self, infos: Mapping[int, OffloadInfo]) -> list[LedgerInfo]:
        """Persist ``infos`` durably (synced) before returning; the ledgers written.
        The engine writes all or none: it raises ``NoSuchLedger``, having changed
        nothing, if one ledger is gone.  Cluster mode writes them in etcd
        transactions of a few dozen and leaves out a ledger gone meanwhile, or
        whose offload lock this node no longer holds (docs/cluster.md §10)."""
