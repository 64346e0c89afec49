"""Plain values the engine hands out: ledgers, entries, add results, pending calls."""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Generic, NamedTuple, Protocol, TypeAlias, TypeVar

T = TypeVar("T")


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
    # While IN_PROGRESS: the multipart upload of the segment being written
    # (its key and id) and its parts known uploaded, as (part_number,
    # size_bytes, etag), so that a restart resumes the upload (offload/).
    upload_key: str | None = None
    upload_id: str | None = None
    upload_parts: tuple[tuple[int, int, str], ...] = ()
    # Offload attempts that failed in a row (0 once one succeeds), and while
    # FAILED when the service retries by itself (epoch seconds; None: never).
    failures: int = 0
    retry_at: float | None = None
    # A small ledger packed with others into one shared object (offload/_packer.py):
    # the pack's data object, where the ledger's member starts in it (its
    # frames, ``segment_bytes`` long, then its segment index,
    # ``pack_index_bytes`` long) and the data object's size.  While
    # IN_PROGRESS, ``pack_key`` names the pack being written.  None: the
    # ledger has objects of its own under ``key_prefix``.
    pack_key: str | None = None
    pack_offset: int = 0
    pack_index_bytes: int = 0
    pack_bytes: int = 0

    def to_doc(self) -> dict[str, Any]:
        """The record as JSON values (the ledger record's and, in cluster mode, the
        ledger metadata's ``offload``).  Field by field rather than
        ``dataclasses.asdict``, which deep-copies every value: it was most of the
        cost of a checkpoint that records many ledgers' states at once (a pack)."""
        doc = {name: getattr(self, name) for name in _OFFLOAD_FIELDS}
        doc["state"] = self.state.value
        return doc

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> OffloadInfo:
        """The inverse of :meth:`to_doc`; fields a record written before them
        lacks take their defaults."""
        fields = {name: doc[name] for name in _OFFLOAD_FIELDS if name in doc}
        fields["state"] = OffloadState(doc.get("state", "NONE"))
        # JSON has no tuples.
        fields["upload_parts"] = tuple(tuple(part) for part in doc.get("upload_parts") or ())
        return cls(**fields)


_OFFLOAD_FIELDS = tuple(OffloadInfo.__dataclass_fields__)


@dataclass(frozen=True, kw_only=True, order=True)
class TierPosition:
    """How much of a ledger was tiered to S3 while it was open (offload/ cuts
    its bytes into segments, each stored as chunk objects until close):

    ``segment_first_entry_id``  first entry of the segment being tiered;
    ``byte_position``           bytes of that segment already in chunks;
    ``entry_id``                entries below it are wholly in chunks (the entry
                                straddling ``byte_position`` is not);
    ``entry_offset``            where ``entry_id``'s frame starts in its segment;
    ``segment_start_bytes``     frame bytes of the ledger before the segment.

    Positions only grow, ordered by (segment, byte position); the engine
    persists them (a TIER journal record) and lets GC drop local entries
    below ``entry_id``."""

    segment_first_entry_id: int = 0
    byte_position: int = 0
    entry_id: int = 0
    entry_offset: int = 0
    segment_start_bytes: int = 0


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
    tier: TierPosition = field(default_factory=TierPosition)
    # Entries below this have no local copy any more: GC dropped them once
    # tiered (reads of them go to S3).
    local_first_entry_id: int = 0


@dataclass(frozen=True, kw_only=True)
class LedgerFilter:
    """Which ledgers a listing returns: those in ``state``, whose offload is in
    ``offload_state``, and whose metadata holds every pair of ``metadata``
    (each criterion left out matches all)."""

    state: LedgerState | None = None
    offload_state: OffloadState | None = None
    metadata: Mapping[str, str] = field(default_factory=dict)

    @property
    def narrows(self) -> bool:
        """Whether it may skip many ledgers in a row (more than the state can)."""
        return self.offload_state is not None or bool(self.metadata)

    def matches(self, state: LedgerState, offload_state: OffloadState,
                metadata: Mapping[str, str]) -> bool:
        return ((self.state is None or state == self.state)
                and (self.offload_state is None or offload_state == self.offload_state)
                and all(metadata.get(k) == v for k, v in self.metadata.items()))


@dataclass(frozen=True, kw_only=True)
class Entry:
    ledger_id: int
    entry_id: int
    payload: bytes
    crc32c: int


# What an append takes: a batch's expected first entry id (None: wherever it
# lands; else an idempotent retry or EntryConflict) and its payloads.
Batch: TypeAlias = tuple[int | None, Sequence[bytes]]


# A named tuple, not a frozen dataclass: one is built per batch, and a tuple is
# built in C where a frozen dataclass sets each field in Python.
class BatchAddResult(NamedTuple):
    first_entry_id: int
    last_entry_id: int
    last_add_confirmed: int
    # True when an idempotent retry (``expected_first_entry_id``) found the batch.
    already_present: bool = False


class SyncedMark(Protocol):
    """How far a journal is durable (its records up to here are fdatasynced)."""

    @property
    def synced_offset(self) -> int: ...


class Pending(Generic[T]):
    """An engine call whose effect becomes durable once the journal syncs it.

    ``future`` resolves (on the journal's acker thread) when it is durable, or
    fails with ``DeviceBroken``; :meth:`result` waits for it and returns the
    call's outcome, which reflects everything the acknowledgement changed (the
    LAC of an add includes the add).  Async callers await ``future`` (e.g.
    ``asyncio.wrap_future``) and then call :meth:`result`, which no longer waits.
    """

    __slots__ = ("_finish", "_journal", "_journal_offset", "future")

    def __init__(self, future: Future[Any], finish: Callable[[], T],
                 journal_offset: int = 0, journal: SyncedMark | None = None) -> None:
        self.future = future
        self._finish = finish
        # The end of its journal record, and the journal: see synced().
        self._journal_offset = journal_offset
        self._journal = journal

    def synced(self) -> bool:
        """Durable already, its future maybe not resolved yet: the group commit
        that covered it is being resolved on the journal's thread right now.  A
        caller that answers what one group commit made durable together (a
        stream's acks) waits for the rest of it.  False when not known (no
        journal: an outcome that comes from elsewhere, as in cluster mode)."""
        journal = self._journal
        return journal is not None and self._journal_offset <= journal.synced_offset

    @classmethod
    def ready(cls, value: T) -> Pending[T]:
        """An outcome that was durable already (e.g. closing a closed ledger)."""
        done: Future[Any] = Future()
        done.set_result(None)
        return cls(done, lambda: value)

    def done(self) -> bool:
        return self.future.done()

    def result(self, timeout: float | None = None) -> T:
        self.future.result(timeout)
        return self._finish()

    def outcome(self) -> T:
        """:meth:`result` of a call whose future the caller saw succeed, without
        touching the future again: for Pendings that share one future (a run of
        batches), checked once for all of them."""
        return self._finish()


# Called by a read that chose the entry's local copy, before reading it (tests
# drop the local copy there: a read racing GC, made to happen every time).
ReadHook = Callable[[int, int], None]


class RemoteEntryReader(Protocol):
    """Reads entries of offloaded ledgers whose local copy is gone (offload/)."""

    def read_entry(self, ledger_id: int, entry_id: int,
                   info: OffloadInfo) -> tuple[bytes, int]: ...
