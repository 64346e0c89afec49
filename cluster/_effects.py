"""What the sans-I/O machines ask their driver to do, and the seams drivers implement.

A machine (``LedgerWriter``, ``LedgerRecovery``, ``LedgerRereplicator``) never
does I/O: each call appends effects to its outbox, and ``take_effects()`` hands
them to the driver — the simulation's event loop, or the node's asyncio tasks.
The driver feeds results back: ``on_reply(bookie_id, reply)`` for bookie
answers, ``on_metadata(result)`` for a ``WriteMetadata`` (exactly one result per
write, ``Current`` when the race was lost or the outcome is unknown), and
``tick()`` so the machine can notice timeouts on its injected clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from common.errors import LedgerdError

from ._messages import BookieReply, BookieRequest
from ._metadata import LedgerMetadata


class Clock(Protocol):
    """Monotonic seconds; the simulation's clock only moves when it says so."""

    def now(self) -> float: ...


class Membership(Protocol):
    """The driver's current view of the registered bookies (kept by a watch)."""

    def writable_bookies(self) -> Sequence[str]:
        """Writable bookies, least used first."""
        ...


class MetadataStore(Protocol):
    """Ledger metadata with compare-and-swap on the key's revision (etcd, or the
    simulation's in-memory store with the same semantics)."""

    async def read(self, ledger_id: int) -> tuple[LedgerMetadata, int] | None: ...

    async def create(self, metadata: LedgerMetadata) -> int | None:
        """The new revision, or None when the key already exists."""
        ...

    async def compare_and_swap(self, metadata: LedgerMetadata, expected_revision: int,
                               ) -> Written | Current: ...

    async def delete(self, ledger_id: int, expected_revision: int) -> bool: ...


class BookieClient(Protocol):
    """One request to one bookie (HTTP under ``/internal/v1/`` in production).
    Raises ``BookieUnreachable`` when there is no answer."""

    async def call(self, bookie_id: str, request: BookieRequest) -> BookieReply: ...


# --- effects -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Send:
    bookie_id: str
    request: BookieRequest


@dataclass(frozen=True, slots=True)
class WriteMetadata:
    """Compare-and-swap ``metadata`` if the key is still at ``expected_revision``."""

    expected_revision: int
    metadata: LedgerMetadata


@dataclass(frozen=True, slots=True)
class AddDone:
    token: object
    entry_id: int
    lac: int


@dataclass(frozen=True, slots=True)
class AddFailed:
    token: object
    error: LedgerdError


@dataclass(frozen=True, slots=True)
class LedgerClosedDone:
    """The ledger is CLOSED (by the writer's close or a recovery's close)."""

    token: object
    metadata: LedgerMetadata


@dataclass(frozen=True, slots=True)
class Resumed:
    """A recovery resumed the ledger: ``LedgerRecovery.writer`` is now its writer."""

    metadata: LedgerMetadata


@dataclass(frozen=True, slots=True)
class Stopped:
    """The machine gave up (superseded by another writer, ledger deleted, …)."""

    error: LedgerdError


@dataclass(frozen=True, slots=True)
class RepairDone:
    """Re-replication of a ledger finished: ``entries_copied`` copies made."""

    ledger_id: int
    entries_copied: int
    bytes_copied: int


Effect = (Send | WriteMetadata | AddDone | AddFailed | LedgerClosedDone | Resumed | Stopped
          | RepairDone)


# --- metadata results ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Written:
    revision: int


@dataclass(frozen=True, slots=True)
class Current:
    """The value the key holds now (None: deleted), at ``revision``."""

    metadata: LedgerMetadata | None
    revision: int


MetadataResult = Written | Current
