"""Plain values the engine hands out: ledgers, entries, add results."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class LedgerState(enum.StrEnum):
    OPEN = "OPEN"
    FENCED = "FENCED"
    CLOSED = "CLOSED"


class OffloadState(enum.StrEnum):
    NONE = "NONE"
    PENDING = "PENDING"
    IN_PROGRESS = "IN_PROGRESS"
    OFFLOADED = "OFFLOADED"
    FAILED = "FAILED"


@dataclass(frozen=True, kw_only=True)
class OffloadInfo:
    state: OffloadState = OffloadState.NONE
    bucket: str | None = None
    key_prefix: str | None = None
    segment_bytes: int = 0
    offloaded_at: float | None = None
    local_deleted: bool = False
    error: str | None = None


@dataclass(frozen=True, kw_only=True)
class LedgerInfo:
    """A snapshot of one ledger's metadata. ``last_add_confirmed`` is -1 when empty."""

    ledger_id: int
    state: LedgerState
    last_add_confirmed: int
    length: int
    entries: int
    created_at: float
    closed_at: float | None
    metadata: dict[str, str] = field(default_factory=dict)
    offload: OffloadInfo = field(default_factory=OffloadInfo)


@dataclass(frozen=True, kw_only=True)
class Entry:
    ledger_id: int
    entry_id: int
    payload: bytes
    crc32c: int


@dataclass(frozen=True, kw_only=True)
class AddResult:
    entry_id: int
    last_add_confirmed: int
    crc32c: int
    # True when an idempotent retry (``expected_entry_id``) found the same payload.
    already_present: bool = False


@dataclass(frozen=True, kw_only=True)
class BatchAddResult:
    first_entry_id: int
    last_entry_id: int
    last_add_confirmed: int
    # True when an idempotent retry (``expected_first_entry_id``) found the same payloads.
    already_present: bool = False
